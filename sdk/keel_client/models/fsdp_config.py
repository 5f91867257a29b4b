from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="FSDPConfig")


@_attrs_define
class FSDPConfig:
    """FSDP2 options (VERL: `fsdp_config`); they apply with `strategy: fsdp2` only.

    Attributes:
        optimizer_offload (bool | Unset): Keep the optimizer state in host memory between steps (moved to the device for
            the step).
            Needs `strategy: fsdp2`. Default: False.
        param_offload (bool | Unset): Keep the sharded parameters and gradients in host memory (FSDP2
            `CPUOffloadPolicy`); the
            optimizer step then runs on the CPU. Needs `strategy: fsdp2`. Default: False.
    """

    optimizer_offload: bool | Unset = False
    param_offload: bool | Unset = False

    def to_dict(self) -> dict[str, Any]:
        optimizer_offload = self.optimizer_offload

        param_offload = self.param_offload

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if optimizer_offload is not UNSET:
            field_dict["optimizer_offload"] = optimizer_offload
        if param_offload is not UNSET:
            field_dict["param_offload"] = param_offload

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        optimizer_offload = d.pop("optimizer_offload", UNSET)

        param_offload = d.pop("param_offload", UNSET)

        fsdp_config = cls(
            optimizer_offload=optimizer_offload,
            param_offload=param_offload,
        )

        return fsdp_config
