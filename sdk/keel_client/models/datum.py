from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.loss_fn_inputs import LossFnInputs


T = TypeVar("T", bound="Datum")


@_attrs_define
class Datum:
    """
    Attributes:
        model_input (list[int]):
        loss_fn_inputs (LossFnInputs | Unset): Per-position inputs of the loss, each as long as the datum's
            `model_input`.
    """

    model_input: list[int]
    loss_fn_inputs: LossFnInputs | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        model_input = self.model_input

        loss_fn_inputs: dict[str, Any] | Unset = UNSET
        if not isinstance(self.loss_fn_inputs, Unset):
            loss_fn_inputs = self.loss_fn_inputs.to_dict()

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "model_input": model_input,
            }
        )
        if loss_fn_inputs is not UNSET:
            field_dict["loss_fn_inputs"] = loss_fn_inputs

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.loss_fn_inputs import LossFnInputs  # noqa: PLC0415

        d = dict(src_dict)
        model_input = cast(list[int], d.pop("model_input"))

        _loss_fn_inputs = d.pop("loss_fn_inputs", UNSET)
        loss_fn_inputs: LossFnInputs | Unset
        if isinstance(_loss_fn_inputs, Unset):
            loss_fn_inputs = UNSET
        else:
            loss_fn_inputs = LossFnInputs.from_dict(_loss_fn_inputs)

        datum = cls(
            model_input=model_input,
            loss_fn_inputs=loss_fn_inputs,
        )

        return datum
