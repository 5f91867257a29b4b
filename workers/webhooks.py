"""Webhook delivery, from the workers: a thread of each worker's main process (`workers.tasks`
starts it next to the sweeper) that

1. scans new job events (`job.done`, `job.warning`, `job.checkpoint`) of projects that have
   webhooks into the `webhook_delivery` outbox, one row per (webhook, job, event): a per-job cursor
   (`event_cursor`, consumer `webhooks`) says how far it read, and the unique key makes two workers
   scanning the same events insert each row once;
2. sends the deliveries that are due, signed as Standard Webhooks, and schedules a failed one's next
   attempt from `KEEL_WEBHOOK_RETRY_SCHEDULE_S` (then `failed`).

A sender claims a row by moving its `next_attempt_at` a lease ahead (a conditional UPDATE, after
`SELECT ... FOR UPDATE SKIP LOCKED` on PostgreSQL), so any number of workers never send a message
twice at once; one that dies mid-send leaves the row due again when the lease ends (at least once).
Training never waits on any of this: the job's code only appends events.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy import case, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from core import secretbox
from core.addresses import UnsafeUrl, check_url
from core.clock import db_now
from core.config import settings
from core.db import session_factory
from core.ids import new_id
from core.models import EventCursor, Job, JobEvent, Webhook, WebhookDelivery
from core.webhooks import sign, webhook_type

log = logging.getLogger(__name__)

CONSUMER = "webhooks"
SOURCE_EVENTS = ("job.done", "job.warning", "job.checkpoint", "job.status")
LEASE_MARGIN_S = 30.0
"""A claim lasts the request timeout plus this; a sender gone longer than that lost its claim."""
_JOBS_PER_SCAN = 200
_EVENTS_PER_JOB = 500
_SENDS_PER_PASS = 50
_MAX_ERROR = 500


def _insert(db: Session, table):
    return (postgresql.insert if db.get_bind().dialect.name == "postgresql" else sqlite.insert)(table)


def advance_cursor(db: Session, consumer: str, job_id: str, seq: int) -> None:
    """The cursor of (`consumer`, job) moves to `seq`, never backwards."""
    stmt = _insert(db, EventCursor).values(consumer=consumer, job_id=job_id, last_seq=seq, state={})
    db.execute(stmt.on_conflict_do_update(
        index_elements=[EventCursor.consumer, EventCursor.job_id],
        set_={"last_seq": case((EventCursor.last_seq < stmt.excluded.last_seq, stmt.excluded.last_seq),
                               else_=EventCursor.last_seq)}))


def _payload(webhook_event: str, event: JobEvent, job: Any) -> dict[str, Any]:
    data = {"object": "job.event", "job_id": event.job_id, "seq": event.seq, "project": job.project_id,
            **{k: v for k, v in (event.data or {}).items() if k not in ("job_id", "seq")}}
    if webhook_event == "job.failed" and job.error:
        data["error"] = {k: job.error.get(k) for k in ("code", "message", "param", "error_id") if job.error.get(k)}
    return {"type": webhook_event, "timestamp": event.created_at.isoformat(), "data": data}


def scan_events() -> int:
    """Turn new events of jobs in projects with webhooks into deliveries; returns how many rows it tried
    to add (duplicates of another worker's are dropped by the database)."""
    added = 0
    with session_factory()() as db:
        hooks = db.execute(select(Webhook.id, Webhook.project_id, Webhook.event_types, Webhook.created_at)).all()
        if not hooks:
            return 0
        by_project: dict[str, list[Any]] = defaultdict(list)
        for hook in hooks:
            by_project[hook.project_id].append(hook)
        read = func.coalesce(EventCursor.last_seq, 0)
        jobs = db.execute(
            select(Job.id, Job.project_id, Job.last_event_seq, Job.error, read.label("cursor"))
            .outerjoin(EventCursor, (EventCursor.job_id == Job.id) & (EventCursor.consumer == CONSUMER))
            .where(Job.project_id.in_(list(by_project)), Job.last_event_seq > read)
            .limit(_JOBS_PER_SCAN)).all()
        now = db_now(db)
        for job in jobs:
            events = list(db.scalars(select(JobEvent).where(JobEvent.job_id == job.id, JobEvent.seq > job.cursor,
                                                            JobEvent.seq <= job.last_event_seq)
                                     .order_by(JobEvent.seq).limit(_EVENTS_PER_JOB)))
            rows = []
            for event in events:
                kind = webhook_type(event.type, event.data or {}) if event.type in SOURCE_EVENTS else None
                if kind is None:
                    continue
                for hook in by_project[job.project_id]:
                    # A webhook gets what happened after it was made, nothing older.
                    if kind in hook.event_types and event.created_at >= hook.created_at:
                        rows.append({"id": new_id("msg"), "webhook_id": hook.id, "job_id": job.id, "event_seq": event.seq,
                                     "event_type": kind, "payload": _payload(kind, event, job), "status": "pending",
                                     "attempts": 0, "next_attempt_at": now, "created_at": now})
            if rows:
                db.execute(_insert(db, WebhookDelivery).values(rows).on_conflict_do_nothing(
                    index_elements=[WebhookDelivery.webhook_id, WebhookDelivery.job_id, WebhookDelivery.event_seq]))
                added += len(rows)
            full = len(events) == _EVENTS_PER_JOB
            advance_cursor(db, CONSUMER, job.id, events[-1].seq if full else job.last_event_seq)
        db.commit()
    return added


@dataclass(frozen=True)
class Claimed:
    id: str
    attempts: int
    """Attempts made before this one."""
    url: str
    secret: str
    payload: dict[str, Any]


def claim_due(token: str, limit: int = _SENDS_PER_PASS) -> list[Claimed]:
    """Claim up to `limit` due deliveries for this sender (see the module docstring)."""
    with session_factory()() as db:
        now = db_now(db)
        due = (WebhookDelivery.status == "pending") & (WebhookDelivery.next_attempt_at <= now)
        ids = db.scalars(select(WebhookDelivery.id).where(due).order_by(WebhookDelivery.next_attempt_at)
                         .limit(limit).with_for_update(skip_locked=True)).all()
        if not ids:
            db.rollback()
            return []
        lease = now + timedelta(seconds=settings.WEBHOOK_TIMEOUT_S + LEASE_MARGIN_S)
        won = db.scalars(update(WebhookDelivery).where(WebhookDelivery.id.in_(ids), due)
                         .values(next_attempt_at=lease, claimed_by=token)
                         .returning(WebhookDelivery.id).execution_options(synchronize_session=False)).all()
        rows = db.execute(select(WebhookDelivery.id, WebhookDelivery.attempts, WebhookDelivery.payload,
                                 Webhook.url, Webhook.secret)
                          .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                          .where(WebhookDelivery.id.in_(list(won)))).all()
        db.commit()
    return [Claimed(r.id, r.attempts, r.url, r.secret, r.payload) for r in rows]


def post(client: httpx.Client, url: str, secret: str, msg_id: str, body: bytes) -> httpx.Response:
    """POST a signed message to `url`, connecting to the very address `check_url` approved (so a DNS
    answer that changes between the check and the connection cannot redirect it). Redirects are not
    followed. Raises UnsafeUrl or httpx errors."""
    host, address, port = check_url(url)
    parts = urlsplit(url)
    pinned = f"[{address}]" if ":" in address else address
    netloc = pinned if parts.port is None else f"{pinned}:{port}"
    timestamp = int(time.time())
    headers = {"content-type": "application/json", "user-agent": "Keel-Webhooks/1",
               "host": parts.netloc.rsplit("@", 1)[-1],
               "webhook-id": msg_id, "webhook-timestamp": str(timestamp),
               "webhook-signature": sign(secret, msg_id, timestamp, body)}
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    return client.post(urlunsplit(parts._replace(netloc=netloc)), content=body, headers=headers,
                       extensions=extensions, timeout=settings.WEBHOOK_TIMEOUT_S)


def send(client: httpx.Client, token: str, item: Claimed) -> bool:
    """One attempt, recorded; True when the receiver accepted it (any 2xx)."""
    body = json.dumps(item.payload, separators=(",", ":"), sort_keys=True).encode()
    code, error = None, None
    try:
        response = post(client, item.url, secretbox.open_sealed(item.secret), item.id, body)
        code = response.status_code
        if not 200 <= code < 300:
            error = f"HTTP {code}"
    except (UnsafeUrl, ValueError) as exc:  # ValueError: the secret cannot be decrypted any more
        error = str(exc)
    except httpx.HTTPError as exc:
        error = f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
    record(token, item, code, error)
    return error is None


def record(token: str, item: Claimed, code: int | None, error: str | None) -> None:
    attempts = item.attempts + 1
    schedule = settings.WEBHOOK_RETRY_SCHEDULE_S
    with session_factory()() as db:
        now = db_now(db)
        values: dict[str, Any] = {"attempts": attempts, "last_status_code": code,
                                  "last_error": None if error is None else error[:_MAX_ERROR], "claimed_by": None}
        if error is None:
            values.update(status="succeeded", next_attempt_at=None, delivered_at=now)
        elif attempts > len(schedule):
            values.update(status="failed", next_attempt_at=None)
        else:
            values["next_attempt_at"] = now + timedelta(seconds=schedule[attempts - 1])
        # Fenced by the claim: a sender whose lease ran out does not overwrite the next one's outcome.
        db.execute(update(WebhookDelivery).where(WebhookDelivery.id == item.id, WebhookDelivery.claimed_by == token)
                   .values(**values).execution_options(synchronize_session=False))
        db.commit()
    if error is not None:
        log.info("webhook delivery %s attempt %d failed: %s", item.id, attempts, error)


class WebhookSender(threading.Thread):
    """`scan_events` then send what is due, every `interval_s`, until `stop()`."""

    def __init__(self, interval_s: float | None = None, concurrency: int = 8) -> None:
        super().__init__(daemon=True, name="keel-webhooks")
        self.interval_s = settings.OUTBOX_POLL_S if interval_s is None else interval_s
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop_event = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="keel-webhook-send")
        self._client = httpx.Client(follow_redirects=False, trust_env=False)

    def run_once(self) -> int:
        """One pass; returns how many deliveries it attempted."""
        scan_events()
        claimed = claim_due(self.token)
        list(self._pool.map(lambda item: send(self._client, self.token, item), claimed))
        return len(claimed)

    def run(self) -> None:
        log.info("webhook sender started (every %.1f s)", self.interval_s)
        while not self._stop_event.is_set():
            try:
                busy = self.run_once()
            except Exception:  # the database may be away: keep going
                log.exception("webhook pass failed")
                busy = 0
            if self._stop_event.wait(0 if busy else self.interval_s):
                break
        self._pool.shutdown(wait=True)
        self._client.close()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop_event.set()
        self.join(timeout)
