"""Webhooks and their delivery log as the API shows them. The signing secret appears once, in the
answer to the creation."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from api.pagination import Page
from api.schemas.hyperparameters import Strict

WebhookEventType = Literal["job.succeeded", "job.failed", "job.cancelled", "job.warning", "job.checkpoint",
                           "job.paused"]
ALL_EVENT_TYPES: list[WebhookEventType] = ["job.succeeded", "job.failed", "job.cancelled", "job.warning",
                                           "job.checkpoint", "job.paused"]


class WebhookCreate(Strict):
    """An endpoint that receives the project's job events as signed POSTs."""

    url: Annotated[str, Field(min_length=1, max_length=2000)]
    """An http(s) URL that resolves to a public address (unless the deployment allows private ones)."""
    event_types: list[WebhookEventType] = Field(default_factory=lambda: list(ALL_EVENT_TYPES), min_length=1,
                                                max_length=len(ALL_EVENT_TYPES))
    """The events to send (default: all). `job.succeeded` / `job.failed` / `job.cancelled` when a job
    finishes, `job.warning` (e.g. PPO's KL guardrail), `job.checkpoint` when one is saved, `job.paused` when
    a pause is complete (the job holds no resources)."""


class WebhookPublic(BaseModel):
    """A webhook, without its secret."""

    id: str
    object: Literal["webhook"] = "webhook"
    url: str
    event_types: list[WebhookEventType]
    created_at: int
    """Unix seconds."""


class WebhookCreated(WebhookPublic):
    """The new webhook with its signing secret (`whsec_...`), shown this once. Verify deliveries with any
    Standard Webhooks library: `webhook-signature` is `v1,` + base64 HMAC-SHA256 of
    `{webhook-id}.{webhook-timestamp}.{body}` under the base64-decoded part after `whsec_`."""

    secret: str


class WebhooksPublic(Page[WebhookPublic]):
    pass


class WebhookDeleted(BaseModel):
    id: str
    object: Literal["webhook.deleted"] = "webhook.deleted"
    deleted: bool = True


class WebhookDeliveryPublic(BaseModel):
    """One message to a webhook: sent at least once, retried with backoff until accepted (a 2xx) or
    the retry schedule (about a day) is spent."""

    id: str
    """Also the `webhook-id` header of every attempt (receivers drop duplicates by it)."""
    object: Literal["webhook.delivery"] = "webhook.delivery"
    webhook_id: str
    job_id: str
    event_type: WebhookEventType
    status: Literal["pending", "succeeded", "failed"]
    """`failed`: every retry was spent."""
    attempts: int
    last_status_code: int | None
    """The receiver's HTTP status on the latest attempt (null: no answer, see `last_error`)."""
    last_error: str | None
    next_attempt_at: int | None
    """Unix seconds of the next attempt (null once succeeded or failed)."""
    created_at: int
    delivered_at: int | None


class WebhookDeliveriesPublic(Page[WebhookDeliveryPublic]):
    pass
