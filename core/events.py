"""The job event log. The database is the source of truth: an event is committed first, then
published on Redis (when configured) for live fan-out. Readers that miss a publish lose nothing:
they re-read the table after their last `seq`."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from core.config import settings
from core.models import Job, JobEvent

log = logging.getLogger(__name__)

EVENT_TYPES = ("job.status", "job.metrics", "job.checkpoint", "job.log", "job.warning", "job.error", "job.done",
               "job.placement", "job.samples")
CHANNEL_PREFIX = "keel:job:"


def channel(job_id: str) -> str:
    return CHANNEL_PREFIX + job_id


def append_event(db: Session, job_id: str, type: str, data: dict[str, Any] | None = None,
                 *, commit: bool = True) -> JobEvent:
    """Append an event with the job's next `seq` (atomic counter bump), commit, then publish."""
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {type!r}")
    seq = db.execute(update(Job).where(Job.id == job_id).values(last_event_seq=Job.last_event_seq + 1)
                     .returning(Job.last_event_seq)).scalar_one()
    event = JobEvent(job_id=job_id, seq=seq, type=type, data=data or {}, created_at=datetime.now(UTC))
    db.add(event)
    if commit:
        db.commit()
        publish(event)
    return event


def event_payload(event: JobEvent) -> dict[str, Any]:
    return {"seq": event.seq, "type": event.type, "data": event.data,
            "created_at": event.created_at.isoformat() if event.created_at else None}


def read_events(db: Session, job_id: str, after: int = 0, limit: int = 100) -> list[JobEvent]:
    return list(db.scalars(select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.seq > after)
                           .order_by(JobEvent.seq).limit(limit)))


_redis = None


def redis_client():
    """A shared Redis client, or None when live fan-out is not configured."""
    global _redis
    if not settings.REDIS_URL:
        return None
    if _redis is None:
        import redis

        _redis = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    return _redis


def publish(event: JobEvent) -> None:
    """Best effort: Redis is transport, the row is already committed."""
    client = redis_client()
    if client is None:
        return
    try:
        client.publish(channel(event.job_id), json.dumps(event_payload(event)))
    except Exception as exc:  # noqa: BLE001 - a Redis outage must never fail the writer
        log.warning("event publish failed for %s seq %s: %s", event.job_id, event.seq, exc)
