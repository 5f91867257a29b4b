from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.trajectory_reward_create_metadata import TrajectoryRewardCreateMetadata


T = TypeVar("T", bound="TrajectoryRewardCreate")


@_attrs_define
class TrajectoryRewardCreate:
    """A finished trajectory's outcome.

    Attributes:
        reward (float): The trajectory's score (finite); every sample cut from it earns it.
        group_id (None | str | Unset): Trajectories of one group (e.g. several attempts at one task) share a baseline
            under a group
            estimator (`grpo`, `rloo`, ...); without one a trajectory is a group of its own.
        metadata (TrajectoryRewardCreateMetadata | Unset): Up to 16 string pairs of your own.
    """

    reward: float
    group_id: None | str | Unset = UNSET
    metadata: TrajectoryRewardCreateMetadata | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        reward = self.reward

        group_id: None | str | Unset
        if isinstance(self.group_id, Unset):
            group_id = UNSET
        else:
            group_id = self.group_id

        metadata: dict[str, Any] | Unset = UNSET
        if not isinstance(self.metadata, Unset):
            metadata = self.metadata.to_dict()

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "reward": reward,
            }
        )
        if group_id is not UNSET:
            field_dict["group_id"] = group_id
        if metadata is not UNSET:
            field_dict["metadata"] = metadata

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.trajectory_reward_create_metadata import TrajectoryRewardCreateMetadata  # noqa: PLC0415

        d = dict(src_dict)
        reward = d.pop("reward")

        def _parse_group_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        group_id = _parse_group_id(d.pop("group_id", UNSET))

        _metadata = d.pop("metadata", UNSET)
        metadata: TrajectoryRewardCreateMetadata | Unset
        if isinstance(_metadata, Unset):
            metadata = UNSET
        else:
            metadata = TrajectoryRewardCreateMetadata.from_dict(_metadata)

        trajectory_reward_create = cls(
            reward=reward,
            group_id=group_id,
            metadata=metadata,
        )

        return trajectory_reward_create
