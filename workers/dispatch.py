"""The one module the API imports from workers: enqueue by task name (no task code imported), and
ask for a cancel. No torch, ray or engine imports.

The job table is the outbox: `job.dispatched_at` stays null until the broker accepted the task. A
sender first claims the job with a conditional UPDATE (so two senders never both send), then
publishes, and un-claims it if the broker refused. Whatever is left undispatched, the sweeper
(`workers.sweeper`) sends later: an accepted job is never lost to a broker outage.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import or_, update

from core.clock import db_now
from core.db import session_factory
from core.models import Job, utcnow
from workers.celery_app import JOB_QUEUE, celery_app
from workers.reporter import transition

log = logging.getLogger(__name__)

RUN_JOB_TASK = "keel.run_job"
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
    """Send `keel.run_job(job_id)` after the job's row is committed. False when the broker could not
    be reached: the job stays queued with `dispatched_at` null and the sweeper sends it later.
    True also when someone (a sweeper) already sent it."""
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
    celery_app.send_task(RUN_JOB_TASK, args=[job_id], queue=JOB_QUEUE, retry=True, retry_policy=_PUBLISH_RETRY)


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
