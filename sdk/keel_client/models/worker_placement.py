from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="WorkerPlacement")


@_attrs_define
class WorkerPlacement:
    """Where one worker of a job runs (the `job.placement` event of its latest attempt).

    Attributes:
        node_id (None | str):
        node_ip (str):
        rank (int):
        role (str):
        hostname (None | str | Unset):
        pid (int | None | Unset):
    """

    node_id: None | str
    node_ip: str
    rank: int
    role: str
    hostname: None | str | Unset = UNSET
    pid: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        node_id: None | str
        node_id = self.node_id

        node_ip = self.node_ip

        rank = self.rank

        role = self.role

        hostname: None | str | Unset
        if isinstance(self.hostname, Unset):
            hostname = UNSET
        else:
            hostname = self.hostname

        pid: int | None | Unset
        if isinstance(self.pid, Unset):
            pid = UNSET
        else:
            pid = self.pid

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "node_id": node_id,
                "node_ip": node_ip,
                "rank": rank,
                "role": role,
            }
        )
        if hostname is not UNSET:
            field_dict["hostname"] = hostname
        if pid is not UNSET:
            field_dict["pid"] = pid

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)

        def _parse_node_id(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        node_id = _parse_node_id(d.pop("node_id"))

        node_ip = d.pop("node_ip")

        rank = d.pop("rank")

        role = d.pop("role")

        def _parse_hostname(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        hostname = _parse_hostname(d.pop("hostname", UNSET))

        def _parse_pid(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        pid = _parse_pid(d.pop("pid", UNSET))

        worker_placement = cls(
            node_id=node_id,
            node_ip=node_ip,
            rank=rank,
            role=role,
            hostname=hostname,
            pid=pid,
        )

        worker_placement.additional_properties = d
        return worker_placement

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
