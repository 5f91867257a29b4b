"""What an environment is to the episode loop (`engine.rollout.episodes`).

One `Environment` object serves one episode: `reset` with the prompt row, then `step` once per
assistant turn with that turn's text, until a step says `done` or the loop's limits cut the episode
(`rollout.multi_turn`). What a step returns is chat messages (a tool result, an environment's
observation as a user turn): the loop renders only those new messages with the chat template and
appends their tokens, so no earlier token is ever re-tokenized.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class EnvironmentFailure(Exception):
    """The environment itself failed (a remote server gone, a timeout past its retries): the episode
    is dropped and counted (`episode/failed`), not the job, up to `rollout.multi_turn.max_failed_frac`."""


@dataclass
class Step:
    """An environment's answer to one assistant turn."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    """New chat messages to append (role `tool` or `user`); empty when the episode ends here."""
    reward: float | None = None
    """This turn's reward, placed on the turn's last assistant token (None: no per-turn reward)."""
    done: bool = False
    final_reward: float | None = None
    """With `done`: the episode's outcome reward. None leaves the score to the job's reward function,
    which then reads the final assistant turn (as a single-turn response would be)."""
    tool_calls: int = 0
    """Tool calls this turn made (parsed from the assistant text)."""
    tool_errors: int = 0
    """Of those, the ones answered with an error (bad JSON, unknown tool, a tool that raised)."""


class Environment(Protocol):
    def reset(self, row: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Start an episode for prompt row `row` (`ground_truth`, `data_source`, `prompt`, `conversation`,
        `environment`); returns messages to append after the prompt before the first turn (usually none)."""

    def step(self, text: str) -> Step:
        """The assistant's turn `text` (decoded, special tokens skipped); raises `EnvironmentFailure`."""

    def close(self) -> None:
        """Release what the episode held (a remote session, a sandbox)."""
