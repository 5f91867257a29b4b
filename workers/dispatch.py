"""The one module the API imports from workers: enqueue by task name (no task code imported), and
ask for a cancel or a pause. No torch, ray or engine imports.

The job table is the outbox: `job.dispatched_at` stays null until the broker accepted the task. A
sender first claims the job with a conditional UPDATE (so two senders never both send), then
publishes, and un-claims it if the broker refused. The workers' sweepers (`workers.sweeper`) send
what is left undispatched, woken by PostgreSQL as soon as such a row is committed
(`workers.wakeup`): every job the API creates, and any the broker refused. An accepted job is never
lost to a broker outage, and a create never waits for the broker.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, update

from core.clock import db_now, db_now_sql
from core.db import session_factory
from core.models import Job, Trainer, utcnow
from workers.celery_app import JOB_QUEUE, celery_app
from workers.reporter import transition

log = logging.getLogger(__name__)

RUN_JOB_TASK = "keel.run_job"
RUN_TRAINER_TASK = "keel.run_trainer"
_PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}
"""A down broker answers within about a second, so the API never hangs on it."""


def broker_reachable(timeout: float = 2.0) -> bool:
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
        return True
    except Exception:  # noqa: BLE001 - any failure means not reachable
        return False


def enqueue_job(job_id: str) -> bool:
    """Claim and send `keel.run_job(job_id)` for a queued job nobody sent yet (a resume). False when
    the broker could not be reached: the job stays queued with `dispatched_at` null and the sweeper
    sends it later. True also when someone (a sweeper) already sent it."""
    return send_job(job_id) is not False


def send_job(job_id: str, *, previous: datetime | None = None) -> bool | None:
    """Claim a queued job whose `dispatched_at` is `previous` (null: never sent) and send it.

    Returns True when sent, None when the job was not ours to send (not queued, or another sender
    claimed it first), False when the broker refused (the claim is undone)."""
    now = utcnow()
    if not _set_dispatched(job_id, previous, now):
        return None
    try:
        _publish(job_id)
    except Exception as exc:  # noqa: BLE001 - any broker failure: the outbox keeps the job
        log.warning("job %s not dispatched, the broker is unreachable (%s); the sweeper will retry", job_id, exc)
        _set_dispatched(job_id, now, None)
        return False
    return True


def _publish(job_id: str) -> None:
    with celery_app.producer_or_acquire() as producer:  # the pool's producer, as send_task would take
        celery_app.send_task(RUN_JOB_TASK, args=[job_id], queue=JOB_QUEUE, retry=True, retry_policy=_PUBLISH_RETRY,
                             producer=producer, declare=_declare(producer, JOB_QUEUE))
        # Only after a publish: its channel is connected by then (reading it before would connect it
        # outside `_PUBLISH_RETRY`, with the broker's own, much longer, retries).
        _keep_client(producer.channel)


def _declare(producer: Any, queue_name: str) -> list | None:
    """What to declare before this publish: nothing when kombu has declared the queue on the
    producer's connection already (its `declared_entities`, emptied whenever the connection is
    re-established), else None (Celery's default: the queue, declared once and remembered). kombu would
    skip the declaration then too, but only after binding copies of the queue and its exchange to the
    channel and wrapping the check in the retry policy: about a fifth of a publish. Reads no channel
    (so connects nothing outside the retry policy)."""
    connection = getattr(producer, "__connection__", None)
    queue = celery_app.amqp.queues[queue_name]
    if connection is None or not queue.can_cache_declaration or hash(queue) not in connection.declared_entities:
        return None
    return []


def _keep_client(channel: object) -> None:
    """Make a kombu Redis channel publish through one `redis.Redis` of its own instead of building a
    new one for every message (kombu's `conn_or_acquire`: about a fifth of a publish's CPU, most of it
    filling the client's table of response callbacks). The client is a handle on the channel's
    connection pool, as each one kombu builds is, so nothing else changes; it is rebuilt when the
    channel has a new pool. Other transports (the SQLAlchemy broker) are left alone."""
    create = getattr(channel, "_create_client", None)
    if create is None or not hasattr(channel, "conn_or_acquire"):
        return
    pool = channel.pool
    kept = getattr(channel, "_keel_client", None)
    if kept is not None and kept.connection_pool is pool:
        return
    client = create()
    channel._keel_client = client
    channel.conn_or_acquire = lambda client=None, kept=client: nullcontext(client or kept)


def _set_dispatched(job_id: str, expect: datetime | None, value: datetime | None) -> bool:
    """Conditionally move `dispatched_at` from `expect` to `value` on a queued job."""
    current = Job.dispatched_at.is_(None) if expect is None else Job.dispatched_at == expect
    with session_factory()() as db:
        n = db.execute(update(Job).where(Job.id == job_id, Job.status == "queued", current)
                       .values(dispatched_at=value).execution_options(synchronize_session=False)).rowcount
        db.commit()
    return n == 1


def request_cancel(job_id: str, *, heartbeat_timeout_s: float | None = None) -> bool:
    """Act on a job the API has just set to `cancelling`.

    A worker running it sees the flag within about a second (its reporter polls the job) and kills
    the job's Ray actors; nothing needs sending. A `cancelling` job that no worker is running (no
    heartbeat, or one older than the timeout) is finished here and now. Returns True when the job
    was moved to `cancelled` by this call."""
    from core.config import settings

    timeout = settings.WORKER_HEARTBEAT_TIMEOUT_S if heartbeat_timeout_s is None else heartbeat_timeout_s
    with session_factory()() as db:  # heartbeats are on the database's clock: judge them on it
        now = db_now(db)
    return cancel_if_idle(job_id, now - timedelta(seconds=timeout))


def cancel_if_idle(job_id: str, stale_before: datetime) -> bool:
    """`cancelling` -> `cancelled` when no worker heartbeat is newer than `stale_before`."""
    return transition(job_id, "cancelled", expect=("cancelling",),
                      where=[or_(Job.heartbeat_at.is_(None), Job.heartbeat_at < stale_before)],
                      values={"finished_at": utcnow()}, after=[("job.done", {"status": "cancelled"})])


RELEASED = {"worker_id": None, "heartbeat_at": None, "controller_heartbeat_at": None, "dispatched_at": None}
"""A `paused` job's row: no worker holds it, and a resume sends it afresh (`enqueue_job`)."""


def request_pause(job_id: str, *, heartbeat_timeout_s: float | None = None) -> bool:
    """Act on a job the API has just set to `pausing`.

    A worker running it sees the flag within about a second: the method checkpoints its last step
    and stops, and the worker marks the job `paused`. A `pausing` job that no worker is running is
    `paused` here and now (its newest checkpoint is where it resumes). True when this call paused it."""
    from core.config import settings

    timeout = settings.WORKER_HEARTBEAT_TIMEOUT_S if heartbeat_timeout_s is None else heartbeat_timeout_s
    with session_factory()() as db:
        now = db_now(db)
    return pause_if_idle(job_id, now - timedelta(seconds=timeout))


def pause_if_idle(job_id: str, stale_before: datetime) -> bool:
    """`pausing` -> `paused` when no worker heartbeat is newer than `stale_before`."""
    return transition(job_id, "paused", expect=("pausing",),
                      where=[or_(Job.heartbeat_at.is_(None), Job.heartbeat_at < stale_before)], values=RELEASED)


def enqueue_trainer(trainer_id: str, *, stale_before: datetime | None = None) -> bool:
    """Send `keel.run_trainer(trainer_id)` (drain its queued operations, release its actor when it was
    deleted or idle) unless a worker holds the trainer's lease or a task was sent and not started yet:
    the holder (or that task) sees whatever is committed before it lets the lease go, since it clears
    `dispatched_at` together with the lease and looks again after. A task sent before `stale_before`
    and never started (lost with the broker) is sent again. False when the broker refused (the claim is
    undone; the sweeper sends it later)."""
    unsent = Trainer.dispatched_at.is_(None)
    if stale_before is not None:
        unsent = or_(unsent, Trainer.dispatched_at < stale_before)
    with session_factory()() as db:
        free = or_(Trainer.lease_until.is_(None), Trainer.lease_until < db_now_sql())
        n = db.execute(update(Trainer).where(Trainer.id == trainer_id, free, unsent)
                       .values(dispatched_at=utcnow()).execution_options(synchronize_session=False)).rowcount
        db.commit()
    if n != 1:
        return True
    try:
        celery_app.send_task(RUN_TRAINER_TASK, args=[trainer_id], queue=JOB_QUEUE, retry=True,
                             retry_policy=_PUBLISH_RETRY)
    except Exception as exc:  # noqa: BLE001 - any broker failure: the sweeper sends it later
        log.warning("trainer %s not dispatched, the broker is unreachable (%s)", trainer_id, exc)
        with session_factory()() as db:
            db.execute(update(Trainer).where(Trainer.id == trainer_id).values(dispatched_at=None)
                       .execution_options(synchronize_session=False))
            db.commit()
        return False
    return True
