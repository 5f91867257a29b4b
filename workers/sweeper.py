"""The sweeper: sends what the outbox holds and recovers jobs whose worker died.

Every `SWEEP_INTERVAL_S`:

1. lost workers: a `running` job whose heartbeat is older than `WORKER_HEARTBEAT_TIMEOUT_S` goes
   back to `queued` (`job.warning` worker_lost + `job.status`); the re-run resumes from its newest
   checkpoint. After `MAX_ATTEMPTS` starts it fails with `worker_lost` instead. A `cancelling` job
   whose worker died is simply `cancelled`.
2. dispatch: queued jobs never sent (`dispatched_at` null: the broker was down, or the worker
   deferred them because their project was at `MAX_RUNNING_JOBS_PER_PROJECT`) are sent, oldest
   first, as far as their project has free slots. A job sent long ago that no worker ever took
   (`REDISPATCH_AFTER_S`: a message lost with the broker) is sent again; duplicates are harmless,
   the task claims a job once.

Every change is a conditional UPDATE, so any number of sweepers can run at once. `keel up` (and every
`keel worker`) runs one in a thread of the Celery worker's main process (`workers.tasks`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import func, or_, select

from core.config import settings
from core.db import session_factory
from core.models import Job, utcnow
from workers.dispatch import cancel_if_idle, send_job
from workers.reporter import ACTIVE, transition

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 2.0
MAX_ATTEMPTS = 3
"""Starts of one job before a lost worker fails it instead of re-queueing it."""
REDISPATCH_AFTER_S = 600.0
_BATCH = 500


@dataclass
class SweepResult:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    dispatched: list[str] = field(default_factory=list)


def sweep_once(*, heartbeat_timeout_s: float | None = None, max_attempts: int = MAX_ATTEMPTS,
               max_running: int | None = None) -> SweepResult:
    result = recover_lost_jobs(heartbeat_timeout_s=heartbeat_timeout_s, max_attempts=max_attempts)
    result.dispatched = dispatch_pending(max_running=max_running)
    return result


def recover_lost_jobs(*, heartbeat_timeout_s: float | None = None,
                      max_attempts: int = MAX_ATTEMPTS) -> SweepResult:
    """Re-queue (or fail, or finish cancelling) jobs whose worker stopped heartbeating."""
    timeout = settings.WORKER_HEARTBEAT_TIMEOUT_S if heartbeat_timeout_s is None else heartbeat_timeout_s
    cutoff = utcnow() - timedelta(seconds=timeout)
    stale = or_(Job.heartbeat_at.is_(None), Job.heartbeat_at < cutoff)
    with session_factory()() as db:
        rows = db.execute(select(Job.id, Job.status, Job.attempts, Job.worker_id)
                          .where(Job.status.in_(ACTIVE), stale).order_by(Job.created_at).limit(_BATCH)).all()
    result = SweepResult()
    for row in rows:
        if row.status == "cancelling":
            if cancel_if_idle(row.id, cutoff):
                result.cancelled.append(row.id)
            continue
        outcome = requeue_or_fail(row.id, row.attempts, f"the worker running attempt {row.attempts} stopped "
                                  f"heartbeating for over {timeout:.0f} s", worker_id=row.worker_id,
                                  max_attempts=max_attempts, where=[stale])
        if outcome == "queued":
            result.requeued.append(row.id)
        elif outcome == "failed":
            result.failed.append(row.id)
    if result.requeued or result.failed or result.cancelled:
        log.warning("lost workers: requeued %s, failed %s, cancelled %s", result.requeued, result.failed,
                    result.cancelled)
    return result


def requeue_or_fail(job_id: str, attempt: int, message: str, *, worker_id: str | None = None,
                    max_attempts: int = MAX_ATTEMPTS, where: list[Any] | None = None) -> str | None:
    """Attempt `attempt` of a running job lost its worker: back to `queued` (the next attempt
    resumes from the newest checkpoint), or `failed` with `worker_lost` once `max_attempts` started.
    Returns the new status, or None when the job had already moved on."""
    fence = [Job.attempts == attempt, *(where or [])]
    if attempt >= max_attempts:
        error = {"code": "worker_lost", "message": f"{message}; gave up after {attempt} attempts"}
        done = transition(job_id, "failed", expect=("running",), where=fence,
                          values={"error": error, "finished_at": utcnow()}, before=[("job.error", error)],
                          after=[("job.done", {"status": "failed"})])
        return "failed" if done else None
    warning = {"code": "worker_lost", "message": f"{message}; re-queued to resume from its latest checkpoint",
               "data": {"attempt": attempt, "worker_id": worker_id}}
    done = transition(job_id, "queued", expect=("running",), where=fence,
                      values={"dispatched_at": None, "worker_id": None, "heartbeat_at": None},
                      before=[("job.warning", warning)])
    return "queued" if done else None


def dispatch_pending(*, max_running: int | None = None,
                     redispatch_after_s: float = REDISPATCH_AFTER_S) -> list[str]:
    """Send undispatched queued jobs, oldest first, within their project's free running slots."""
    limit = settings.MAX_RUNNING_JOBS_PER_PROJECT if max_running is None else max_running
    fresh = utcnow() - timedelta(seconds=redispatch_after_s)
    with session_factory()() as db:
        pending = db.execute(select(Job.id, Job.project_id, Job.dispatched_at)
                             .where(Job.status == "queued", or_(Job.dispatched_at.is_(None), Job.dispatched_at < fresh))
                             .order_by(Job.created_at).limit(_BATCH)).all()
        if not pending:
            return []
        projects = {row.project_id for row in pending}
        busy = dict(db.execute(
            select(Job.project_id, func.count()).where(Job.project_id.in_(projects), or_(
                Job.status.in_(ACTIVE), (Job.status == "queued") & (Job.dispatched_at >= fresh)))
            .group_by(Job.project_id)).all())
    sent: list[str] = []
    for row in pending:
        if busy.get(row.project_id, 0) >= limit:
            continue
        outcome = send_job(row.id, previous=row.dispatched_at)
        if outcome is False:
            break  # the broker is down: try again next sweep
        if outcome:
            sent.append(row.id)
            busy[row.project_id] = busy.get(row.project_id, 0) + 1
    if sent:
        log.info("dispatched %d queued job(s): %s", len(sent), sent)
    return sent


class Sweeper(threading.Thread):
    """`sweep_once` every `interval_s` in a daemon thread until `stop()`."""

    def __init__(self, interval_s: float = SWEEP_INTERVAL_S) -> None:
        super().__init__(daemon=True, name="keel-sweeper")
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        log.info("sweeper started (every %.1f s)", self.interval_s)
        while True:
            try:
                sweep_once()
            except Exception:  # the database may be down: keep sweeping
                log.exception("sweep failed")
            if self._stop_event.wait(self.interval_s):
                return

    def stop(self, timeout: float = 10.0) -> None:
        self._stop_event.set()
        self.join(timeout)
