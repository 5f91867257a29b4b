from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="RoleMemory")


@_attrs_define
class RoleMemory:
    """Estimated bytes of one model on one worker (device bytes, and `host_bytes` kept in host memory).

    Attributes:
        activations_bytes (int):
        gradients_bytes (int):
        host_bytes (int):
        optimizer_bytes (int):
        parameters (int):
        total_bytes (int):
        trainable_parameters (int):
        weights_bytes (int):
    """

    activations_bytes: int
    gradients_bytes: int
    host_bytes: int
    optimizer_bytes: int
    parameters: int
    total_bytes: int
    trainable_parameters: int
    weights_bytes: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        activations_bytes = self.activations_bytes

        gradients_bytes = self.gradients_bytes

        host_bytes = self.host_bytes

        optimizer_bytes = self.optimizer_bytes

        parameters = self.parameters

        total_bytes = self.total_bytes

        trainable_parameters = self.trainable_parameters

        weights_bytes = self.weights_bytes

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "activations_bytes": activations_bytes,
                "gradients_bytes": gradients_bytes,
                "host_bytes": host_bytes,
                "optimizer_bytes": optimizer_bytes,
                "parameters": parameters,
                "total_bytes": total_bytes,
                "trainable_parameters": trainable_parameters,
                "weights_bytes": weights_bytes,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        activations_bytes = d.pop("activations_bytes")

        gradients_bytes = d.pop("gradients_bytes")

        host_bytes = d.pop("host_bytes")

        optimizer_bytes = d.pop("optimizer_bytes")

        parameters = d.pop("parameters")

        total_bytes = d.pop("total_bytes")

        trainable_parameters = d.pop("trainable_parameters")

        weights_bytes = d.pop("weights_bytes")

        role_memory = cls(
            activations_bytes=activations_bytes,
            gradients_bytes=gradients_bytes,
            host_bytes=host_bytes,
            optimizer_bytes=optimizer_bytes,
            parameters=parameters,
            total_bytes=total_bytes,
            trainable_parameters=trainable_parameters,
            weights_bytes=weights_bytes,
        )

        role_memory.additional_properties = d
        return role_memory

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
