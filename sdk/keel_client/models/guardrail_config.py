from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.reward_filter_config import RewardFilterConfig


T = TypeVar("T", bound="GuardrailConfig")


@_attrs_define
class GuardrailConfig:
    """The recipe's monitoring points, enforced.

    Attributes:
        max_rollbacks (int | Unset): After this many rollbacks the job fails with `diverged`. Default: 3.
        reward_filter (RewardFilterConfig | Unset): PF-PPO style filtering of unreliable rewards (Zhang et al. 2024,
            arXiv:2409.06957).
        rollback_clip_ratio (float | Unset): Mitigation: tighten `clip_ratio` to this after a rollback. Default: 0.1.
        rollback_kl (float | Unset): KL per step above this (or a non-finite loss/gradient) restores the last good
            checkpoint. Default: 0.3.
        rollback_lr_factor (float | Unset): Mitigation: multiply the actor LR by this after a rollback. Default: 0.5.
        step_timeout_s (float | Unset): A step longer than this fails the job with `step_timeout`. Default: 3600.0.
        warn_kl (float | Unset): KL per step above this emits `job.warning`; at most `rollback_kl`. Default: 0.2.
    """

    max_rollbacks: int | Unset = 3
    reward_filter: RewardFilterConfig | Unset = UNSET
    rollback_clip_ratio: float | Unset = 0.1
    rollback_kl: float | Unset = 0.3
    rollback_lr_factor: float | Unset = 0.5
    step_timeout_s: float | Unset = 3600.0
    warn_kl: float | Unset = 0.2

    def to_dict(self) -> dict[str, Any]:
        max_rollbacks = self.max_rollbacks

        reward_filter: dict[str, Any] | Unset = UNSET
        if not isinstance(self.reward_filter, Unset):
            reward_filter = self.reward_filter.to_dict()

        rollback_clip_ratio = self.rollback_clip_ratio

        rollback_kl = self.rollback_kl

        rollback_lr_factor = self.rollback_lr_factor

        step_timeout_s = self.step_timeout_s

        warn_kl = self.warn_kl

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if max_rollbacks is not UNSET:
            field_dict["max_rollbacks"] = max_rollbacks
        if reward_filter is not UNSET:
            field_dict["reward_filter"] = reward_filter
        if rollback_clip_ratio is not UNSET:
            field_dict["rollback_clip_ratio"] = rollback_clip_ratio
        if rollback_kl is not UNSET:
            field_dict["rollback_kl"] = rollback_kl
        if rollback_lr_factor is not UNSET:
            field_dict["rollback_lr_factor"] = rollback_lr_factor
        if step_timeout_s is not UNSET:
            field_dict["step_timeout_s"] = step_timeout_s
        if warn_kl is not UNSET:
            field_dict["warn_kl"] = warn_kl

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.reward_filter_config import RewardFilterConfig  # noqa: PLC0415

        d = dict(src_dict)
        max_rollbacks = d.pop("max_rollbacks", UNSET)

        _reward_filter = d.pop("reward_filter", UNSET)
        reward_filter: RewardFilterConfig | Unset
        if isinstance(_reward_filter, Unset):
            reward_filter = UNSET
        else:
            reward_filter = RewardFilterConfig.from_dict(_reward_filter)

        rollback_clip_ratio = d.pop("rollback_clip_ratio", UNSET)

        rollback_kl = d.pop("rollback_kl", UNSET)

        rollback_lr_factor = d.pop("rollback_lr_factor", UNSET)

        step_timeout_s = d.pop("step_timeout_s", UNSET)

        warn_kl = d.pop("warn_kl", UNSET)

        guardrail_config = cls(
            max_rollbacks=max_rollbacks,
            reward_filter=reward_filter,
            rollback_clip_ratio=rollback_clip_ratio,
            rollback_kl=rollback_kl,
            rollback_lr_factor=rollback_lr_factor,
            step_timeout_s=step_timeout_s,
            warn_kl=warn_kl,
        )

        return guardrail_config
