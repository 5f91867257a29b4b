from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..models.reward_filter_config_mode import RewardFilterConfigMode
from ..types import UNSET, Unset

T = TypeVar("T", bound="RewardFilterConfig")


@_attrs_define
class RewardFilterConfig:
    """PF-PPO style filtering of unreliable rewards (Zhang et al. 2024, arXiv:2409.06957).

    Attributes:
        enable (bool | Unset):  Default: False.
        mode (RewardFilterConfigMode | Unset): Within each prompt's group of `rollout.n` samples, train on the best and
            the worst (or the best
            and a random other) sample; ties are broken at random; a group whose scores all tie is kept whole. Default:
            RewardFilterConfigMode.BEST_WORST.
        replay_buffer_size (int | Unset): Kept high-confidence samples replayed in later steps (0 disables replay; `gae`
            only: a
            critic-free estimator has no group for a replayed sample). Default: 0.
    """

    enable: bool | Unset = False
    mode: RewardFilterConfigMode | Unset = RewardFilterConfigMode.BEST_WORST
    replay_buffer_size: int | Unset = 0

    def to_dict(self) -> dict[str, Any]:
        enable = self.enable

        mode: str | Unset = UNSET
        if not isinstance(self.mode, Unset):
            mode = self.mode.value

        replay_buffer_size = self.replay_buffer_size

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if enable is not UNSET:
            field_dict["enable"] = enable
        if mode is not UNSET:
            field_dict["mode"] = mode
        if replay_buffer_size is not UNSET:
            field_dict["replay_buffer_size"] = replay_buffer_size

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        enable = d.pop("enable", UNSET)

        _mode = d.pop("mode", UNSET)
        mode: RewardFilterConfigMode | Unset
        if isinstance(_mode, Unset):
            mode = UNSET
        else:
            mode = RewardFilterConfigMode(_mode)

        replay_buffer_size = d.pop("replay_buffer_size", UNSET)

        reward_filter_config = cls(
            enable=enable,
            mode=mode,
            replay_buffer_size=replay_buffer_size,
        )

        return reward_filter_config
