from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.manifest_gpu import ManifestGpu
    from ..models.manifest_ray import ManifestRay


T = TypeVar("T", bound="ManifestHardware")


@_attrs_define
class ManifestHardware:
    """The node that ran the job's controller, and the Ray cluster around it.

    Attributes:
        cpu_count (int | None | Unset):
        cpu_model (None | str | Unset):
        cpus_usable (int | None | Unset):
        gpus (list[ManifestGpu] | Unset):
        memory_bytes (int | None | Unset):
        platform (None | str | Unset):
        python (None | str | Unset):
        ray (ManifestRay | None | Unset):
        ray_nodes (int | None | Unset):
    """

    cpu_count: int | None | Unset = UNSET
    cpu_model: None | str | Unset = UNSET
    cpus_usable: int | None | Unset = UNSET
    gpus: list[ManifestGpu] | Unset = UNSET
    memory_bytes: int | None | Unset = UNSET
    platform: None | str | Unset = UNSET
    python: None | str | Unset = UNSET
    ray: ManifestRay | None | Unset = UNSET
    ray_nodes: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.manifest_ray import ManifestRay  # noqa: PLC0415

        cpu_count: int | None | Unset
        if isinstance(self.cpu_count, Unset):
            cpu_count = UNSET
        else:
            cpu_count = self.cpu_count

        cpu_model: None | str | Unset
        if isinstance(self.cpu_model, Unset):
            cpu_model = UNSET
        else:
            cpu_model = self.cpu_model

        cpus_usable: int | None | Unset
        if isinstance(self.cpus_usable, Unset):
            cpus_usable = UNSET
        else:
            cpus_usable = self.cpus_usable

        gpus: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.gpus, Unset):
            gpus = []
            for gpus_item_data in self.gpus:
                gpus_item = gpus_item_data.to_dict()
                gpus.append(gpus_item)

        memory_bytes: int | None | Unset
        if isinstance(self.memory_bytes, Unset):
            memory_bytes = UNSET
        else:
            memory_bytes = self.memory_bytes

        platform: None | str | Unset
        if isinstance(self.platform, Unset):
            platform = UNSET
        else:
            platform = self.platform

        python: None | str | Unset
        if isinstance(self.python, Unset):
            python = UNSET
        else:
            python = self.python

        ray: dict[str, Any] | None | Unset
        if isinstance(self.ray, Unset):
            ray = UNSET
        elif isinstance(self.ray, ManifestRay):
            ray = self.ray.to_dict()
        else:
            ray = self.ray

        ray_nodes: int | None | Unset
        if isinstance(self.ray_nodes, Unset):
            ray_nodes = UNSET
        else:
            ray_nodes = self.ray_nodes

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if cpu_count is not UNSET:
            field_dict["cpu_count"] = cpu_count
        if cpu_model is not UNSET:
            field_dict["cpu_model"] = cpu_model
        if cpus_usable is not UNSET:
            field_dict["cpus_usable"] = cpus_usable
        if gpus is not UNSET:
            field_dict["gpus"] = gpus
        if memory_bytes is not UNSET:
            field_dict["memory_bytes"] = memory_bytes
        if platform is not UNSET:
            field_dict["platform"] = platform
        if python is not UNSET:
            field_dict["python"] = python
        if ray is not UNSET:
            field_dict["ray"] = ray
        if ray_nodes is not UNSET:
            field_dict["ray_nodes"] = ray_nodes

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.manifest_gpu import ManifestGpu  # noqa: PLC0415
        from ..models.manifest_ray import ManifestRay  # noqa: PLC0415

        d = dict(src_dict)

        def _parse_cpu_count(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        cpu_count = _parse_cpu_count(d.pop("cpu_count", UNSET))

        def _parse_cpu_model(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        cpu_model = _parse_cpu_model(d.pop("cpu_model", UNSET))

        def _parse_cpus_usable(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        cpus_usable = _parse_cpus_usable(d.pop("cpus_usable", UNSET))

        _gpus = d.pop("gpus", UNSET)
        gpus: list[ManifestGpu] | Unset = UNSET
        if _gpus is not UNSET:
            gpus = []
            for gpus_item_data in _gpus:
                gpus_item = ManifestGpu.from_dict(gpus_item_data)

                gpus.append(gpus_item)

        def _parse_memory_bytes(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        memory_bytes = _parse_memory_bytes(d.pop("memory_bytes", UNSET))

        def _parse_platform(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        platform = _parse_platform(d.pop("platform", UNSET))

        def _parse_python(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        python = _parse_python(d.pop("python", UNSET))

        def _parse_ray(data: object) -> ManifestRay | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                ray_type_0 = ManifestRay.from_dict(data)

                return ray_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(ManifestRay | None | Unset, data)

        ray = _parse_ray(d.pop("ray", UNSET))

        def _parse_ray_nodes(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ray_nodes = _parse_ray_nodes(d.pop("ray_nodes", UNSET))

        manifest_hardware = cls(
            cpu_count=cpu_count,
            cpu_model=cpu_model,
            cpus_usable=cpus_usable,
            gpus=gpus,
            memory_bytes=memory_bytes,
            platform=platform,
            python=python,
            ray=ray,
            ray_nodes=ray_nodes,
        )

        manifest_hardware.additional_properties = d
        return manifest_hardware

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
