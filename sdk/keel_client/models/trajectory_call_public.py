from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="TrajectoryCallPublic")


@_attrs_define
class TrajectoryCallPublic:
    """One choice of one recorded call, its tokens as the serving engine sampled them.

    Attributes:
        choice_index (int):
        completion_token_ids (list[int]):
        created_at (int): Unix seconds.
        logprobs (list[float]): The sampled tokens' log-probs (temperature 1), one per completion token.
        model (str):
        prompt_token_ids (list[int]):
    """

    choice_index: int
    completion_token_ids: list[int]
    created_at: int
    logprobs: list[float]
    model: str
    prompt_token_ids: list[int]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        choice_index = self.choice_index

        completion_token_ids = self.completion_token_ids

        created_at = self.created_at

        logprobs = self.logprobs

        model = self.model

        prompt_token_ids = self.prompt_token_ids

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "choice_index": choice_index,
                "completion_token_ids": completion_token_ids,
                "created_at": created_at,
                "logprobs": logprobs,
                "model": model,
                "prompt_token_ids": prompt_token_ids,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        choice_index = d.pop("choice_index")

        completion_token_ids = cast(list[int], d.pop("completion_token_ids"))

        created_at = d.pop("created_at")

        logprobs = cast(list[float], d.pop("logprobs"))

        model = d.pop("model")

        prompt_token_ids = cast(list[int], d.pop("prompt_token_ids"))

        trajectory_call_public = cls(
            choice_index=choice_index,
            completion_token_ids=completion_token_ids,
            created_at=created_at,
            logprobs=logprobs,
            model=model,
            prompt_token_ids=prompt_token_ids,
        )

        trajectory_call_public.additional_properties = d
        return trajectory_call_public

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
