from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="ManifestRay")


@_attrs_define
class ManifestRay:
    """
    Attributes:
        cpus (float):
        gpus (float):
        nodes (int):
        accelerator_types (list[str] | Unset):
    """

    cpus: float
    gpus: float
    nodes: int
    accelerator_types: list[str] | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        cpus = self.cpus

        gpus = self.gpus

        nodes = self.nodes

        accelerator_types: list[str] | Unset = UNSET
        if not isinstance(self.accelerator_types, Unset):
            accelerator_types = self.accelerator_types

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "cpus": cpus,
                "gpus": gpus,
                "nodes": nodes,
            }
        )
        if accelerator_types is not UNSET:
            field_dict["accelerator_types"] = accelerator_types

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        cpus = d.pop("cpus")

        gpus = d.pop("gpus")

        nodes = d.pop("nodes")

        accelerator_types = cast(list[str], d.pop("accelerator_types", UNSET))

        manifest_ray = cls(
            cpus=cpus,
            gpus=gpus,
            nodes=nodes,
            accelerator_types=accelerator_types,
        )

        manifest_ray.additional_properties = d
        return manifest_ray

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
