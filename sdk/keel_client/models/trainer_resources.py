from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="TrainerResources")


@_attrs_define
class TrainerResources:
    """What the trainer's actor reserves on the Ray cluster while it holds the model.

    Attributes:
        num_cpus (float | Unset):  Default: 1.0.
        num_gpus (float | Unset):  Default: 0.0.
    """

    num_cpus: float | Unset = 1.0
    num_gpus: float | Unset = 0.0

    def to_dict(self) -> dict[str, Any]:
        num_cpus = self.num_cpus

        num_gpus = self.num_gpus

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if num_cpus is not UNSET:
            field_dict["num_cpus"] = num_cpus
        if num_gpus is not UNSET:
            field_dict["num_gpus"] = num_gpus

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        num_cpus = d.pop("num_cpus", UNSET)

        num_gpus = d.pop("num_gpus", UNSET)

        trainer_resources = cls(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
        )

        return trainer_resources
