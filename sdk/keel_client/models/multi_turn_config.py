from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="MultiTurnConfig")


@_attrs_define
class MultiTurnConfig:
    """Multi-turn episodes (agentic RL, docs/agentic-rl.md): each prompt runs as an episode against its
    environment (the job's `method.environment`, or the row's `environment` column); the policy trains
    on the tokens it sampled only. Needs `rollout.mode: sync` with `colocate: true`, and no replay.

        Attributes:
            enable (bool | Unset):  Default: False.
            max_episode_tokens (int | Unset): Tokens after the prompt (assistant and environment); 0:
                `data.max_response_length` (at most that). Default: 0.
            max_failed_frac (float | Unset): More than this fraction of a step's episodes failed (the environment raised)
                fails the job
                with `environment_failed`; below it the failed episodes train nothing (`episode/failed`). Default: 0.25.
            max_tokens_per_turn (int | Unset): Tokens one assistant turn may sample; 0: what is left of the episode's
                budget. Default: 0.
            max_tool_calls (int | Unset): Tool calls per episode; past them the episode is truncated. Default: 8.
            max_turns (int | Unset): Assistant turns per episode; an episode still going after them is truncated. Default:
                4.
            tool_format (Literal['hermes'] | Unset): How tool calls are written in the assistant text
                (`<tool_call>{json}</tool_call>`). Default: 'hermes'.
    """

    enable: bool | Unset = False
    max_episode_tokens: int | Unset = 0
    max_failed_frac: float | Unset = 0.25
    max_tokens_per_turn: int | Unset = 0
    max_tool_calls: int | Unset = 8
    max_turns: int | Unset = 4
    tool_format: Literal["hermes"] | Unset = "hermes"

    def to_dict(self) -> dict[str, Any]:
        enable = self.enable

        max_episode_tokens = self.max_episode_tokens

        max_failed_frac = self.max_failed_frac

        max_tokens_per_turn = self.max_tokens_per_turn

        max_tool_calls = self.max_tool_calls

        max_turns = self.max_turns

        tool_format = self.tool_format

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if enable is not UNSET:
            field_dict["enable"] = enable
        if max_episode_tokens is not UNSET:
            field_dict["max_episode_tokens"] = max_episode_tokens
        if max_failed_frac is not UNSET:
            field_dict["max_failed_frac"] = max_failed_frac
        if max_tokens_per_turn is not UNSET:
            field_dict["max_tokens_per_turn"] = max_tokens_per_turn
        if max_tool_calls is not UNSET:
            field_dict["max_tool_calls"] = max_tool_calls
        if max_turns is not UNSET:
            field_dict["max_turns"] = max_turns
        if tool_format is not UNSET:
            field_dict["tool_format"] = tool_format

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        enable = d.pop("enable", UNSET)

        max_episode_tokens = d.pop("max_episode_tokens", UNSET)

        max_failed_frac = d.pop("max_failed_frac", UNSET)

        max_tokens_per_turn = d.pop("max_tokens_per_turn", UNSET)

        max_tool_calls = d.pop("max_tool_calls", UNSET)

        max_turns = d.pop("max_turns", UNSET)

        tool_format = cast(Literal["hermes"] | Unset, d.pop("tool_format", UNSET))
        if tool_format != "hermes" and not isinstance(tool_format, Unset):
            raise ValueError(f"tool_format must match const 'hermes', got '{tool_format}'")

        multi_turn_config = cls(
            enable=enable,
            max_episode_tokens=max_episode_tokens,
            max_failed_frac=max_failed_frac,
            max_tokens_per_turn=max_tokens_per_turn,
            max_tool_calls=max_tool_calls,
            max_turns=max_turns,
            tool_format=tool_format,
        )

        return multi_turn_config
