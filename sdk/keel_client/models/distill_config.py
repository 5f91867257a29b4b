from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="DistillConfig")


@_attrs_define
class DistillConfig:
    """The reward: per token `-reverse_kl_coef * (log p_student - log p_teacher)`, plus
    `task_reward_weight` times the task reward (`method.reward`) on the last token.

        Attributes:
            reverse_kl_coef (float | Unset): Weight of the per-token reverse KL to the teacher. Default: 1.0.
            task_reward_weight (float | Unset): Weight of the task reward (0: the teacher alone; then `method.reward` may be
                left out). Default: 0.0.
    """

    reverse_kl_coef: float | Unset = 1.0
    task_reward_weight: float | Unset = 0.0

    def to_dict(self) -> dict[str, Any]:
        reverse_kl_coef = self.reverse_kl_coef

        task_reward_weight = self.task_reward_weight

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if reverse_kl_coef is not UNSET:
            field_dict["reverse_kl_coef"] = reverse_kl_coef
        if task_reward_weight is not UNSET:
            field_dict["task_reward_weight"] = task_reward_weight

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        reverse_kl_coef = d.pop("reverse_kl_coef", UNSET)

        task_reward_weight = d.pop("task_reward_weight", UNSET)

        distill_config = cls(
            reverse_kl_coef=reverse_kl_coef,
            task_reward_weight=task_reward_weight,
        )

        return distill_config
