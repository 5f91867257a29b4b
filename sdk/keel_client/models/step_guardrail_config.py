from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="StepGuardrailConfig")


@_attrs_define
class StepGuardrailConfig:
    """The step watchdog of SFT, reward-model training and distillation (PPO: `GuardrailConfig`).

    Attributes:
        step_timeout_s (float | Unset): A step longer than this fails the job with `step_timeout`. Default: 3600.0.
    """

    step_timeout_s: float | Unset = 3600.0

    def to_dict(self) -> dict[str, Any]:
        step_timeout_s = self.step_timeout_s

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if step_timeout_s is not UNSET:
            field_dict["step_timeout_s"] = step_timeout_s

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        step_timeout_s = d.pop("step_timeout_s", UNSET)

        step_guardrail_config = cls(
            step_timeout_s=step_timeout_s,
        )

        return step_guardrail_config
