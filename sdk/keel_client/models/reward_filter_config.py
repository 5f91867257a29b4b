from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="RewardFilterConfig")


@_attrs_define
class RewardFilterConfig:
    """PF-PPO style filtering of unreliable rewards (Zhang et al. 2024, arXiv:2409.06957).

    Attributes:
        drop_middle_quantile (float | Unset): Share of samples around the median reward to drop (their rewards are the
            least reliable). Default: 0.5.
        enable (bool | Unset):  Default: False.
        replay_buffer_size (int | Unset): Kept high-confidence samples replayed in later steps (0 disables replay).
            Default: 0.
    """

    drop_middle_quantile: float | Unset = 0.5
    enable: bool | Unset = False
    replay_buffer_size: int | Unset = 0

    def to_dict(self) -> dict[str, Any]:
        drop_middle_quantile = self.drop_middle_quantile

        enable = self.enable

        replay_buffer_size = self.replay_buffer_size

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if drop_middle_quantile is not UNSET:
            field_dict["drop_middle_quantile"] = drop_middle_quantile
        if enable is not UNSET:
            field_dict["enable"] = enable
        if replay_buffer_size is not UNSET:
            field_dict["replay_buffer_size"] = replay_buffer_size

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        drop_middle_quantile = d.pop("drop_middle_quantile", UNSET)

        enable = d.pop("enable", UNSET)

        replay_buffer_size = d.pop("replay_buffer_size", UNSET)

        reward_filter_config = cls(
            drop_middle_quantile=drop_middle_quantile,
            enable=enable,
            replay_buffer_size=replay_buffer_size,
        )

        return reward_filter_config
