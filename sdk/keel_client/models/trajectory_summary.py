from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.trajectory_summary_metadata import TrajectorySummaryMetadata


T = TypeVar("T", bound="TrajectorySummary")


@_attrs_define
class TrajectorySummary:
    """A trajectory: its recorded calls counted, and its outcome.

    Attributes:
        calls (int): Recorded call choices.
        completed_at (int | None): Unix seconds of the (last) reward.
        completion_tokens (int):
        consumed_by (None | str): The snapshot file (`purpose: trajectories`) a training job took the trajectory into;
            None: not trained on yet.
        group_id (None | str):
        id (str):
        metadata (TrajectorySummaryMetadata):
        prompt_tokens (int):
        reward (float | None): None until a reward is posted.
        object_ (Literal['trajectory'] | Unset):  Default: 'trajectory'.
    """

    calls: int
    completed_at: int | None
    completion_tokens: int
    consumed_by: None | str
    group_id: None | str
    id: str
    metadata: TrajectorySummaryMetadata
    prompt_tokens: int
    reward: float | None
    object_: Literal["trajectory"] | Unset = "trajectory"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        calls = self.calls

        completed_at: int | None
        completed_at = self.completed_at

        completion_tokens = self.completion_tokens

        consumed_by: None | str
        consumed_by = self.consumed_by

        group_id: None | str
        group_id = self.group_id

        id = self.id

        metadata = self.metadata.to_dict()

        prompt_tokens = self.prompt_tokens

        reward: float | None
        reward = self.reward

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "calls": calls,
                "completed_at": completed_at,
                "completion_tokens": completion_tokens,
                "consumed_by": consumed_by,
                "group_id": group_id,
                "id": id,
                "metadata": metadata,
                "prompt_tokens": prompt_tokens,
                "reward": reward,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.trajectory_summary_metadata import TrajectorySummaryMetadata  # noqa: PLC0415

        d = dict(src_dict)
        calls = d.pop("calls")

        def _parse_completed_at(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        completed_at = _parse_completed_at(d.pop("completed_at"))

        completion_tokens = d.pop("completion_tokens")

        def _parse_consumed_by(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        consumed_by = _parse_consumed_by(d.pop("consumed_by"))

        def _parse_group_id(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        group_id = _parse_group_id(d.pop("group_id"))

        id = d.pop("id")

        metadata = TrajectorySummaryMetadata.from_dict(d.pop("metadata"))

        prompt_tokens = d.pop("prompt_tokens")

        def _parse_reward(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        reward = _parse_reward(d.pop("reward"))

        object_ = cast(Literal["trajectory"] | Unset, d.pop("object", UNSET))
        if object_ != "trajectory" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'trajectory', got '{object_}'")

        trajectory_summary = cls(
            calls=calls,
            completed_at=completed_at,
            completion_tokens=completion_tokens,
            consumed_by=consumed_by,
            group_id=group_id,
            id=id,
            metadata=metadata,
            prompt_tokens=prompt_tokens,
            reward=reward,
            object_=object_,
        )

        trajectory_summary.additional_properties = d
        return trajectory_summary

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
