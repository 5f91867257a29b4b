from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="ApiKeyPublic")


@_attrs_define
class ApiKeyPublic:
    """An API key, without its secret.

    Attributes:
        admin (bool):
        created_at (int):
        id (str):
        name (None | str):
        prefix (str):
        project (str):
        revoked_at (int | None):
        object_ (Literal['api_key'] | Unset):  Default: 'api_key'.
    """

    admin: bool
    created_at: int
    id: str
    name: None | str
    prefix: str
    project: str
    revoked_at: int | None
    object_: Literal["api_key"] | Unset = "api_key"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        admin = self.admin

        created_at = self.created_at

        id = self.id

        name: None | str
        name = self.name

        prefix = self.prefix

        project = self.project

        revoked_at: int | None
        revoked_at = self.revoked_at

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "admin": admin,
                "created_at": created_at,
                "id": id,
                "name": name,
                "prefix": prefix,
                "project": project,
                "revoked_at": revoked_at,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        admin = d.pop("admin")

        created_at = d.pop("created_at")

        id = d.pop("id")

        def _parse_name(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        name = _parse_name(d.pop("name"))

        prefix = d.pop("prefix")

        project = d.pop("project")

        def _parse_revoked_at(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        revoked_at = _parse_revoked_at(d.pop("revoked_at"))

        object_ = cast(Literal["api_key"] | Unset, d.pop("object", UNSET))
        if object_ != "api_key" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'api_key', got '{object_}'")

        api_key_public = cls(
            admin=admin,
            created_at=created_at,
            id=id,
            name=name,
            prefix=prefix,
            project=project,
            revoked_at=revoked_at,
            object_=object_,
        )

        api_key_public.additional_properties = d
        return api_key_public

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
