from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.memory_plan_device import MemoryPlanDevice
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.memory_capacity import MemoryCapacity
    from ..models.memory_plan_roles import MemoryPlanRoles
    from ..models.worker_memory import WorkerMemory


T = TypeVar("T", bound="MemoryPlan")


@_attrs_define
class MemoryPlan:
    """Estimated memory per worker of a job that was validated but not created.

    Attributes:
        capacity (MemoryCapacity):
        colocated (bool):
        detail (str):
        device (MemoryPlanDevice):
        fits (bool | None):
        method (str):
        num_workers (int):
        param (None | str):
        per_worker (None | WorkerMemory):
        roles (MemoryPlanRoles):
        object_ (Literal['memory_plan'] | Unset):  Default: 'memory_plan'.
    """

    capacity: MemoryCapacity
    colocated: bool
    detail: str
    device: MemoryPlanDevice
    fits: bool | None
    method: str
    num_workers: int
    param: None | str
    per_worker: None | WorkerMemory
    roles: MemoryPlanRoles
    object_: Literal["memory_plan"] | Unset = "memory_plan"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.worker_memory import WorkerMemory  # noqa: PLC0415

        capacity = self.capacity.to_dict()

        colocated = self.colocated

        detail = self.detail

        device = self.device.value

        fits: bool | None
        fits = self.fits

        method = self.method

        num_workers = self.num_workers

        param: None | str
        param = self.param

        per_worker: dict[str, Any] | None
        if isinstance(self.per_worker, WorkerMemory):
            per_worker = self.per_worker.to_dict()
        else:
            per_worker = self.per_worker

        roles = self.roles.to_dict()

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "capacity": capacity,
                "colocated": colocated,
                "detail": detail,
                "device": device,
                "fits": fits,
                "method": method,
                "num_workers": num_workers,
                "param": param,
                "per_worker": per_worker,
                "roles": roles,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.memory_capacity import MemoryCapacity  # noqa: PLC0415
        from ..models.memory_plan_roles import MemoryPlanRoles  # noqa: PLC0415
        from ..models.worker_memory import WorkerMemory  # noqa: PLC0415

        d = dict(src_dict)
        capacity = MemoryCapacity.from_dict(d.pop("capacity"))

        colocated = d.pop("colocated")

        detail = d.pop("detail")

        device = MemoryPlanDevice(d.pop("device"))

        def _parse_fits(data: object) -> bool | None:
            if data is None:
                return data
            return cast(bool | None, data)

        fits = _parse_fits(d.pop("fits"))

        method = d.pop("method")

        num_workers = d.pop("num_workers")

        def _parse_param(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        param = _parse_param(d.pop("param"))

        def _parse_per_worker(data: object) -> None | WorkerMemory:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                per_worker_type_0 = WorkerMemory.from_dict(data)

                return per_worker_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | WorkerMemory, data)

        per_worker = _parse_per_worker(d.pop("per_worker"))

        roles = MemoryPlanRoles.from_dict(d.pop("roles"))

        object_ = cast(Literal["memory_plan"] | Unset, d.pop("object", UNSET))
        if object_ != "memory_plan" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'memory_plan', got '{object_}'")

        memory_plan = cls(
            capacity=capacity,
            colocated=colocated,
            detail=detail,
            device=device,
            fits=fits,
            method=method,
            num_workers=num_workers,
            param=param,
            per_worker=per_worker,
            roles=roles,
            object_=object_,
        )

        memory_plan.additional_properties = d
        return memory_plan

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
