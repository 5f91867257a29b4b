from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="ApiKeyCreated")


@_attrs_define
class ApiKeyCreated:
    """The new key, with its secret: shown this once, only its hash is stored.

    Attributes:
        admin (bool):
        created_at (int):
        id (str):
        key (str):
        name (None | str):
        prefix (str):
        project (str):
        revoked_at (int | None):
        tinker_api_key (str):
        object_ (Literal['api_key'] | Unset):  Default: 'api_key'.
    """

    admin: bool
    created_at: int
    id: str
    key: str
    name: None | str
    prefix: str
    project: str
    revoked_at: int | None
    tinker_api_key: str
    object_: Literal["api_key"] | Unset = "api_key"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        admin = self.admin

        created_at = self.created_at

        id = self.id

        key = self.key

        name: None | str
        name = self.name

        prefix = self.prefix

        project = self.project

        revoked_at: int | None
        revoked_at = self.revoked_at

        tinker_api_key = self.tinker_api_key

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "admin": admin,
                "created_at": created_at,
                "id": id,
                "key": key,
                "name": name,
                "prefix": prefix,
                "project": project,
                "revoked_at": revoked_at,
                "tinker_api_key": tinker_api_key,
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

        key = d.pop("key")

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

        tinker_api_key = d.pop("tinker_api_key")

        object_ = cast(Literal["api_key"] | Unset, d.pop("object", UNSET))
        if object_ != "api_key" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'api_key', got '{object_}'")

        api_key_created = cls(
            admin=admin,
            created_at=created_at,
            id=id,
            key=key,
            name=name,
            prefix=prefix,
            project=project,
            revoked_at=revoked_at,
            tinker_api_key=tinker_api_key,
            object_=object_,
        )

        api_key_created.additional_properties = d
        return api_key_created

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
