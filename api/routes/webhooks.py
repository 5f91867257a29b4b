"""Webhooks: a project's endpoints for job events, and each one's delivery log.

The API only stores endpoints; the workers turn job events into deliveries and send them
(`workers.webhooks`), so a slow receiver never slows a request or a training step.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi import Path as PathParam
from sqlalchemy import delete, select

from api.deps import CurrentProject, SessionDep
from api.errors import ApiError, not_found, problem_responses
from api.pagination import AfterQuery, LimitQuery, page_of, paginate
from api.schemas.webhooks import (
    WebhookCreate,
    WebhookCreated,
    WebhookDeleted,
    WebhookDeliveriesPublic,
    WebhookDeliveryPublic,
    WebhookPublic,
    WebhooksPublic,
)
from core import secretbox
from core.addresses import UnsafeUrl, check_url
from core.models import Webhook, WebhookDelivery
from core.webhooks import new_secret

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


def _unix(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


def webhook_public(row: Webhook) -> WebhookPublic:
    return WebhookPublic(id=row.id, url=row.url, event_types=row.event_types, created_at=_unix(row.created_at))


def delivery_public(row: WebhookDelivery) -> WebhookDeliveryPublic:
    return WebhookDeliveryPublic(id=row.id, webhook_id=row.webhook_id, job_id=row.job_id, event_type=row.event_type,
                                 status=row.status, attempts=row.attempts, last_status_code=row.last_status_code,
                                 last_error=row.last_error, next_attempt_at=_unix(row.next_attempt_at),
                                 created_at=_unix(row.created_at), delivered_at=_unix(row.delivered_at))


def owned_webhook(webhook_id: Annotated[str, PathParam(max_length=64)], project: CurrentProject,
                  db: SessionDep) -> Webhook:
    row = db.get(Webhook, webhook_id)
    if row is None or row.project_id != project.id:
        raise not_found("webhook", webhook_id, param="webhook_id")
    return row


OwnedWebhook = Annotated[Webhook, Depends(owned_webhook)]


@router.post("", status_code=201, summary="Create a webhook", response_model=WebhookCreated,
             responses=problem_responses(401, 422, 429))
def create_webhook(body: WebhookCreate, project: CurrentProject, db: SessionDep):
    """Register an endpoint for the project's job events. The answer holds the signing `secret`, shown
    this once. Takes no `Idempotency-Key`: replaying it would mean storing the secret in the clear."""
    try:
        check_url(body.url)  # blocking DNS: this sync handler runs in the thread pool
    except UnsafeUrl as exc:
        raise ApiError(422, "invalid_url", f"url: {exc}.", param="url") from exc
    secret = new_secret()
    row = Webhook(project_id=project.id, url=body.url, event_types=list(dict.fromkeys(body.event_types)),
                  secret=secretbox.seal(secret))
    db.add(row)
    db.commit()
    return WebhookCreated(**webhook_public(row).model_dump(), secret=secret)


@router.get("", summary="List webhooks", response_model=WebhooksPublic, responses=problem_responses(401, 422, 429))
def list_webhooks(project: CurrentProject, db: SessionDep, limit: LimitQuery = 20, after: AfterQuery = None):
    """The project's webhooks, newest first, without their secrets."""
    rows, has_more = paginate(db, select(Webhook).where(Webhook.project_id == project.id), Webhook.id,
                              limit=limit, after=after)
    return page_of([webhook_public(r) for r in rows], has_more)


@router.get("/{webhook_id}", summary="Retrieve a webhook", response_model=WebhookPublic,
            responses=problem_responses(401, 404, 429))
def retrieve_webhook(webhook: OwnedWebhook):
    """One webhook, without its secret."""
    return webhook_public(webhook)


@router.delete("/{webhook_id}", summary="Delete a webhook", response_model=WebhookDeleted,
               responses=problem_responses(401, 404, 429))
def delete_webhook(webhook: OwnedWebhook, db: SessionDep):
    """Delete a webhook and its delivery log; nothing more is sent to it, pending retries included."""
    db.execute(delete(Webhook).where(Webhook.id == webhook.id))
    db.commit()
    return WebhookDeleted(id=webhook.id)


@router.get("/{webhook_id}/deliveries", summary="List webhook deliveries", response_model=WebhookDeliveriesPublic,
            responses=problem_responses(401, 404, 422, 429))
def list_webhook_deliveries(webhook: OwnedWebhook, db: SessionDep, limit: LimitQuery = 20, after: AfterQuery = None):
    """The webhook's deliveries, newest first: attempts, the receiver's last status code or error, and
    when the next retry is due."""
    rows, has_more = paginate(db, select(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook.id),
                              WebhookDelivery.id, limit=limit, after=after)
    return page_of([delivery_public(r) for r in rows], has_more)
