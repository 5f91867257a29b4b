from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..models.webhook_create_event_types_item import WebhookCreateEventTypesItem
from ..types import UNSET, Unset

T = TypeVar("T", bound="WebhookCreate")


@_attrs_define
class WebhookCreate:
    """An endpoint that receives the project's job events as signed POSTs.

    Attributes:
        url (str): An http(s) URL that resolves to a public address (unless the deployment allows private ones).
        event_types (list[WebhookCreateEventTypesItem] | Unset): The events to send (default: all). `job.succeeded` /
            `job.failed` / `job.cancelled` when a job
            finishes, `job.warning` (e.g. PPO's KL guardrail), `job.checkpoint` when one is saved, `job.paused` when
            a pause is complete (the job holds no resources).
    """

    url: str
    event_types: list[WebhookCreateEventTypesItem] | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        url = self.url

        event_types: list[str] | Unset = UNSET
        if not isinstance(self.event_types, Unset):
            event_types = []
            for event_types_item_data in self.event_types:
                event_types_item = event_types_item_data.value
                event_types.append(event_types_item)

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "url": url,
            }
        )
        if event_types is not UNSET:
            field_dict["event_types"] = event_types

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        url = d.pop("url")

        _event_types = d.pop("event_types", UNSET)
        event_types: list[WebhookCreateEventTypesItem] | Unset = UNSET
        if _event_types is not UNSET:
            event_types = []
            for event_types_item_data in _event_types:
                event_types_item = WebhookCreateEventTypesItem(event_types_item_data)

                event_types.append(event_types_item)

        webhook_create = cls(
            url=url,
            event_types=event_types,
        )

        return webhook_create
