from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="AdamParams")


@_attrs_define
class AdamParams:
    """AdamW hyperparameters of one step (they may change from step to step).

    Attributes:
        beta1 (float | Unset):  Default: 0.9.
        beta2 (float | Unset):  Default: 0.95.
        eps (float | Unset): Tinker's default. Default: 1e-12.
        grad_clip_norm (float | Unset): Clip the global gradient norm to this (0 = no clipping). Default: 0.0.
        learning_rate (float | Unset):  Default: 0.0001.
        weight_decay (float | Unset):  Default: 0.0.
    """

    beta1: float | Unset = 0.9
    beta2: float | Unset = 0.95
    eps: float | Unset = 1e-12
    grad_clip_norm: float | Unset = 0.0
    learning_rate: float | Unset = 0.0001
    weight_decay: float | Unset = 0.0

    def to_dict(self) -> dict[str, Any]:
        beta1 = self.beta1

        beta2 = self.beta2

        eps = self.eps

        grad_clip_norm = self.grad_clip_norm

        learning_rate = self.learning_rate

        weight_decay = self.weight_decay

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if beta1 is not UNSET:
            field_dict["beta1"] = beta1
        if beta2 is not UNSET:
            field_dict["beta2"] = beta2
        if eps is not UNSET:
            field_dict["eps"] = eps
        if grad_clip_norm is not UNSET:
            field_dict["grad_clip_norm"] = grad_clip_norm
        if learning_rate is not UNSET:
            field_dict["learning_rate"] = learning_rate
        if weight_decay is not UNSET:
            field_dict["weight_decay"] = weight_decay

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        beta1 = d.pop("beta1", UNSET)

        beta2 = d.pop("beta2", UNSET)

        eps = d.pop("eps", UNSET)

        grad_clip_norm = d.pop("grad_clip_norm", UNSET)

        learning_rate = d.pop("learning_rate", UNSET)

        weight_decay = d.pop("weight_decay", UNSET)

        adam_params = cls(
            beta1=beta1,
            beta2=beta2,
            eps=eps,
            grad_clip_norm=grad_clip_norm,
            learning_rate=learning_rate,
            weight_decay=weight_decay,
        )

        return adam_params
