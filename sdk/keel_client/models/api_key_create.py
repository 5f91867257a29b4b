from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="ApiKeyCreate")


@_attrs_define
class ApiKeyCreate:
    """A new key of the caller's project.

    Attributes:
        admin (bool | Unset): May manage the project's keys (`/v1/keys`). Default: False.
        name (None | str | Unset): A label to recognise the key by (`ci`, `alice`).
    """

    admin: bool | Unset = False
    name: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        admin = self.admin

        name: None | str | Unset
        if isinstance(self.name, Unset):
            name = UNSET
        else:
            name = self.name

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if admin is not UNSET:
            field_dict["admin"] = admin
        if name is not UNSET:
            field_dict["name"] = name

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        admin = d.pop("admin", UNSET)

        def _parse_name(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        name = _parse_name(d.pop("name", UNSET))

        api_key_create = cls(
            admin=admin,
            name=name,
        )

        return api_key_create
