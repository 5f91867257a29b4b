from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.guardrail_config_collapse_action import GuardrailConfigCollapseAction
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.reward_filter_config import RewardFilterConfig


T = TypeVar("T", bound="GuardrailConfig")


@_attrs_define
class GuardrailConfig:
    """The recipe's monitoring points, enforced.

    Attributes:
        collapse_action (GuardrailConfigCollapseAction | Unset): What a collapse does: `warn` reports `collapse` (with
            decoded samples); `rollback` also
            restores the state before the step, as a KL rollback does. Default: GuardrailConfigCollapseAction.WARN.
        max_logprob_diff (float | None | Unset): `rollout/logprob_diff/mean` (mean |rollout engine log-prob - trainer
            log-prob| per token)
            above this reports `logprob_gap` (None: off).
        max_rollbacks (int | Unset): After this many rollbacks the job fails with `diverged`. Default: 3.
        min_distinct_ratio (float | None | Unset): Collapse: `val/distinct_responses` (distinct responses / validation
            prompts) below this trips
            `collapse_action` (None: off).
        min_entropy (float | None | Unset): Collapse: `actor/entropy` (mean per-token entropy of the update's samples)
            below this trips
            `collapse_action` (None: off).
        reward_filter (RewardFilterConfig | Unset): PF-PPO style filtering of unreliable rewards (Zhang et al. 2024,
            arXiv:2409.06957).
        rollback_clip_ratio (float | Unset): Mitigation: tighten `clip_ratio` to this after a rollback. Default: 0.1.
        rollback_kl (float | Unset): KL per step above this (or a non-finite loss/gradient) restores the last good
            checkpoint. Default: 0.3.
        rollback_lr_factor (float | Unset): Mitigation: multiply the actor LR by this after a rollback. Default: 0.5.
        step_timeout_s (float | Unset): A step longer than this fails the job with `step_timeout`. Default: 3600.0.
        warn_kl (float | Unset): KL per step above this emits `job.warning`; at most `rollback_kl`. Default: 0.2.
    """

    collapse_action: GuardrailConfigCollapseAction | Unset = GuardrailConfigCollapseAction.WARN
    max_logprob_diff: float | None | Unset = UNSET
    max_rollbacks: int | Unset = 3
    min_distinct_ratio: float | None | Unset = UNSET
    min_entropy: float | None | Unset = UNSET
    reward_filter: RewardFilterConfig | Unset = UNSET
    rollback_clip_ratio: float | Unset = 0.1
    rollback_kl: float | Unset = 0.3
    rollback_lr_factor: float | Unset = 0.5
    step_timeout_s: float | Unset = 3600.0
    warn_kl: float | Unset = 0.2

    def to_dict(self) -> dict[str, Any]:
        collapse_action: str | Unset = UNSET
        if not isinstance(self.collapse_action, Unset):
            collapse_action = self.collapse_action.value

        max_logprob_diff: float | None | Unset
        if isinstance(self.max_logprob_diff, Unset):
            max_logprob_diff = UNSET
        else:
            max_logprob_diff = self.max_logprob_diff

        max_rollbacks = self.max_rollbacks

        min_distinct_ratio: float | None | Unset
        if isinstance(self.min_distinct_ratio, Unset):
            min_distinct_ratio = UNSET
        else:
            min_distinct_ratio = self.min_distinct_ratio

        min_entropy: float | None | Unset
        if isinstance(self.min_entropy, Unset):
            min_entropy = UNSET
        else:
            min_entropy = self.min_entropy

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
        if collapse_action is not UNSET:
            field_dict["collapse_action"] = collapse_action
        if max_logprob_diff is not UNSET:
            field_dict["max_logprob_diff"] = max_logprob_diff
        if max_rollbacks is not UNSET:
            field_dict["max_rollbacks"] = max_rollbacks
        if min_distinct_ratio is not UNSET:
            field_dict["min_distinct_ratio"] = min_distinct_ratio
        if min_entropy is not UNSET:
            field_dict["min_entropy"] = min_entropy
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
        _collapse_action = d.pop("collapse_action", UNSET)
        collapse_action: GuardrailConfigCollapseAction | Unset
        if isinstance(_collapse_action, Unset):
            collapse_action = UNSET
        else:
            collapse_action = GuardrailConfigCollapseAction(_collapse_action)

        def _parse_max_logprob_diff(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        max_logprob_diff = _parse_max_logprob_diff(d.pop("max_logprob_diff", UNSET))

        max_rollbacks = d.pop("max_rollbacks", UNSET)

        def _parse_min_distinct_ratio(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        min_distinct_ratio = _parse_min_distinct_ratio(d.pop("min_distinct_ratio", UNSET))

        def _parse_min_entropy(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        min_entropy = _parse_min_entropy(d.pop("min_entropy", UNSET))

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
            collapse_action=collapse_action,
            max_logprob_diff=max_logprob_diff,
            max_rollbacks=max_rollbacks,
            min_distinct_ratio=min_distinct_ratio,
            min_entropy=min_entropy,
            reward_filter=reward_filter,
            rollback_clip_ratio=rollback_clip_ratio,
            rollback_kl=rollback_kl,
            rollback_lr_factor=rollback_lr_factor,
            step_timeout_s=step_timeout_s,
            warn_kl=warn_kl,
        )

        return guardrail_config
