from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.webhook_delivery_public_event_type import WebhookDeliveryPublicEventType
from ..models.webhook_delivery_public_status import WebhookDeliveryPublicStatus
from ..types import UNSET, Unset

T = TypeVar("T", bound="WebhookDeliveryPublic")


@_attrs_define
class WebhookDeliveryPublic:
    """One message to a webhook: sent at least once, retried with backoff until accepted (a 2xx) or
    the retry schedule (about a day) is spent.

        Attributes:
            attempts (int):
            created_at (int):
            delivered_at (int | None):
            event_type (WebhookDeliveryPublicEventType):
            id (str):
            job_id (str):
            last_error (None | str):
            last_status_code (int | None):
            next_attempt_at (int | None):
            status (WebhookDeliveryPublicStatus):
            webhook_id (str):
            object_ (Literal['webhook.delivery'] | Unset):  Default: 'webhook.delivery'.
    """

    attempts: int
    created_at: int
    delivered_at: int | None
    event_type: WebhookDeliveryPublicEventType
    id: str
    job_id: str
    last_error: None | str
    last_status_code: int | None
    next_attempt_at: int | None
    status: WebhookDeliveryPublicStatus
    webhook_id: str
    object_: Literal["webhook.delivery"] | Unset = "webhook.delivery"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        attempts = self.attempts

        created_at = self.created_at

        delivered_at: int | None
        delivered_at = self.delivered_at

        event_type = self.event_type.value

        id = self.id

        job_id = self.job_id

        last_error: None | str
        last_error = self.last_error

        last_status_code: int | None
        last_status_code = self.last_status_code

        next_attempt_at: int | None
        next_attempt_at = self.next_attempt_at

        status = self.status.value

        webhook_id = self.webhook_id

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "attempts": attempts,
                "created_at": created_at,
                "delivered_at": delivered_at,
                "event_type": event_type,
                "id": id,
                "job_id": job_id,
                "last_error": last_error,
                "last_status_code": last_status_code,
                "next_attempt_at": next_attempt_at,
                "status": status,
                "webhook_id": webhook_id,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        attempts = d.pop("attempts")

        created_at = d.pop("created_at")

        def _parse_delivered_at(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        delivered_at = _parse_delivered_at(d.pop("delivered_at"))

        event_type = WebhookDeliveryPublicEventType(d.pop("event_type"))

        id = d.pop("id")

        job_id = d.pop("job_id")

        def _parse_last_error(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        last_error = _parse_last_error(d.pop("last_error"))

        def _parse_last_status_code(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_status_code = _parse_last_status_code(d.pop("last_status_code"))

        def _parse_next_attempt_at(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        next_attempt_at = _parse_next_attempt_at(d.pop("next_attempt_at"))

        status = WebhookDeliveryPublicStatus(d.pop("status"))

        webhook_id = d.pop("webhook_id")

        object_ = cast(Literal["webhook.delivery"] | Unset, d.pop("object", UNSET))
        if object_ != "webhook.delivery" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'webhook.delivery', got '{object_}'")

        webhook_delivery_public = cls(
            attempts=attempts,
            created_at=created_at,
            delivered_at=delivered_at,
            event_type=event_type,
            id=id,
            job_id=job_id,
            last_error=last_error,
            last_status_code=last_status_code,
            next_attempt_at=next_attempt_at,
            status=status,
            webhook_id=webhook_id,
            object_=object_,
        )

        webhook_delivery_public.additional_properties = d
        return webhook_delivery_public

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
