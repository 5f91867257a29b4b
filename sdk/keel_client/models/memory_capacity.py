from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="MemoryCapacity")


@_attrs_define
class MemoryCapacity:
    """
    Attributes:
        gpu_bytes (int | None):
        host_bytes (int | None):
    """

    gpu_bytes: int | None
    host_bytes: int | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        gpu_bytes: int | None
        gpu_bytes = self.gpu_bytes

        host_bytes: int | None
        host_bytes = self.host_bytes

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "gpu_bytes": gpu_bytes,
                "host_bytes": host_bytes,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)

        def _parse_gpu_bytes(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        gpu_bytes = _parse_gpu_bytes(d.pop("gpu_bytes"))

        def _parse_host_bytes(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        host_bytes = _parse_host_bytes(d.pop("host_bytes"))

        memory_capacity = cls(
            gpu_bytes=gpu_bytes,
            host_bytes=host_bytes,
        )

        memory_capacity.additional_properties = d
        return memory_capacity

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
