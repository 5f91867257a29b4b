from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.webhook_public_event_types_item import WebhookPublicEventTypesItem
from ..types import UNSET, Unset

T = TypeVar("T", bound="WebhookPublic")


@_attrs_define
class WebhookPublic:
    """A webhook, without its secret.

    Attributes:
        created_at (int):
        event_types (list[WebhookPublicEventTypesItem]):
        id (str):
        url (str):
        object_ (Literal['webhook'] | Unset):  Default: 'webhook'.
    """

    created_at: int
    event_types: list[WebhookPublicEventTypesItem]
    id: str
    url: str
    object_: Literal["webhook"] | Unset = "webhook"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        created_at = self.created_at

        event_types = []
        for event_types_item_data in self.event_types:
            event_types_item = event_types_item_data.value
            event_types.append(event_types_item)

        id = self.id

        url = self.url

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created_at": created_at,
                "event_types": event_types,
                "id": id,
                "url": url,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        created_at = d.pop("created_at")

        event_types = []
        _event_types = d.pop("event_types")
        for event_types_item_data in _event_types:
            event_types_item = WebhookPublicEventTypesItem(event_types_item_data)

            event_types.append(event_types_item)

        id = d.pop("id")

        url = d.pop("url")

        object_ = cast(Literal["webhook"] | Unset, d.pop("object", UNSET))
        if object_ != "webhook" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'webhook', got '{object_}'")

        webhook_public = cls(
            created_at=created_at,
            event_types=event_types,
            id=id,
            url=url,
            object_=object_,
        )

        webhook_public.additional_properties = d
        return webhook_public

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
