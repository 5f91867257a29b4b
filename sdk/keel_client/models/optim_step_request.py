from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.adam_params import AdamParams


T = TypeVar("T", bound="OptimStepRequest")


@_attrs_define
class OptimStepRequest:
    """Apply the gradients accumulated since the last step.

    Attributes:
        adam_params (AdamParams | Unset): AdamW hyperparameters of one step (they may change from step to step).
    """

    adam_params: AdamParams | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        adam_params: dict[str, Any] | Unset = UNSET
        if not isinstance(self.adam_params, Unset):
            adam_params = self.adam_params.to_dict()

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if adam_params is not UNSET:
            field_dict["adam_params"] = adam_params

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.adam_params import AdamParams  # noqa: PLC0415

        d = dict(src_dict)
        _adam_params = d.pop("adam_params", UNSET)
        adam_params: AdamParams | Unset
        if isinstance(_adam_params, Unset):
            adam_params = UNSET
        else:
            adam_params = AdamParams.from_dict(_adam_params)

        optim_step_request = cls(
            adam_params=adam_params,
        )

        return optim_step_request
