from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..models.eval_model_config_dtype import EvalModelConfigDtype
from ..types import UNSET, Unset

T = TypeVar("T", bound="EvalModelConfig")


@_attrs_define
class EvalModelConfig:
    """How the evaluated models are held: frozen, in `dtype`.

    Attributes:
        dtype (EvalModelConfigDtype | Unset): Compute dtype of every model of the job (the policy, `compare_to`, a
            reward model). Default: EvalModelConfigDtype.FLOAT32.
    """

    dtype: EvalModelConfigDtype | Unset = EvalModelConfigDtype.FLOAT32

    def to_dict(self) -> dict[str, Any]:
        dtype: str | Unset = UNSET
        if not isinstance(self.dtype, Unset):
            dtype = self.dtype.value

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if dtype is not UNSET:
            field_dict["dtype"] = dtype

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        _dtype = d.pop("dtype", UNSET)
        dtype: EvalModelConfigDtype | Unset
        if isinstance(_dtype, Unset):
            dtype = UNSET
        else:
            dtype = EvalModelConfigDtype(_dtype)

        eval_model_config = cls(
            dtype=dtype,
        )

        return eval_model_config
