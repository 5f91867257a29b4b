"""The sweeper: sends what the outbox holds and recovers jobs whose worker died.

Every `SWEEP_INTERVAL_S`:

1. lost workers: a `running` job whose heartbeat is older than `WORKER_HEARTBEAT_TIMEOUT_S` goes
   back to `queued` (`job.warning` worker_lost + `job.status`); the re-run resumes from its newest
   checkpoint. After `MAX_ATTEMPTS` starts (those that ended in a pause not counted,
   `workers.pauses`) it fails with `worker_lost` instead. A `cancelling` job whose worker died is
   simply `cancelled`, a `pausing` one `paused` (it resumes from its newest checkpoint). Heartbeats are written and judged on the database's
   clock (`core.clock`), never a host's. After the database was unreachable, heartbeats are not
   judged for one heartbeat timeout: the workers could not beat during the outage, and need that
   long to beat again once it is back (`Sweeper`).
2. dispatch: queued jobs never sent (`dispatched_at` null: every job the API creates, and
   those the broker refused or a worker deferred because their project was at
   `MAX_RUNNING_JOBS_PER_PROJECT` or the cluster had no room) are sent as far as their project has
   free slots and the cluster free capacity (what the workers publish, `core.capacity`, less what
   jobs sent but not yet claimed will take). Fair between projects: round-robin over the projects
   (those with fewer jobs running or sent first, then the one with the oldest job), each one's
   oldest job first. No backfill: once a job does not fit, no job after it is sent in that pass (a
   big job is never overtaken for ever by small ones); the jobs left have `queue_reason`
   `waiting_for_resources`. A job sent long ago that no worker ever took (`REDISPATCH_AFTER_S`: a
   message lost with the broker) is sent again; duplicates are harmless, the task claims a job once.
   Besides the periodic pass, a dispatch pass runs whenever PostgreSQL notifies that a queued job
   awaits dispatch (`workers.wakeup`): a new job is sent within milliseconds of its commit. Where no
   notification can come (SQLite, the listener reconnecting) a dispatch pass runs every `WAKEUP_GAP_S`.

3. trainers (`workers.trainer_sweeper`): operations lost with their worker fail, and drain tasks are
   sent for trainers with queued operations no worker holds, deleted ones not yet released, and
   active ones idle past their `idle_timeout_s`.

Every change is a conditional UPDATE, so any number of sweepers can run at once. `keel up` (and every
`keel worker`) runs one in a thread of the Celery worker's main process (`workers.tasks`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.exc import DBAPIError

from core.capacity import fresh_nodes, job_demand, place
from core.clock import db_now
from core.config import settings
from core.db import session_factory
from core.models import Job, utcnow
from workers.dispatch import cancel_if_idle, pause_if_idle, send_job
from workers.pauses import pause_history
from workers.reporter import ACTIVE, transition
from workers.trainer_sweeper import sweep_trainers
from workers.wakeup import for_database

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 2.0
WAKEUP_GAP_S = 0.25
"""Least time between two passes, woken or periodic; how often a sweeper that cannot be woken (SQLite,
its listener reconnecting) looks for jobs to send."""
MAX_ATTEMPTS = 3
"""Starts of one job before a lost worker fails it instead of re-queueing it."""
REDISPATCH_AFTER_S = 600.0
WAITING_FOR_RESOURCES = "waiting_for_resources"
_BATCH = 500


@dataclass
class SweepResult:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    dispatched: list[str] = field(default_factory=list)


def sweep_once(*, heartbeat_timeout_s: float | None = None, max_attempts: int = MAX_ATTEMPTS,
               max_running: int | None = None, judge_heartbeats: bool = True) -> SweepResult:
    result = (recover_lost_jobs(heartbeat_timeout_s=heartbeat_timeout_s, max_attempts=max_attempts)
              if judge_heartbeats else SweepResult())
    result.dispatched = dispatch_pending(max_running=max_running)
    sweep_trainers()  # interactive trainers: lost operations, undelivered drains, idle releases
    return result


def recover_lost_jobs(*, heartbeat_timeout_s: float | None = None,
                      max_attempts: int = MAX_ATTEMPTS) -> SweepResult:
    """Re-queue (or fail, or finish cancelling or pausing) jobs whose worker stopped heartbeating."""
    timeout = settings.WORKER_HEARTBEAT_TIMEOUT_S if heartbeat_timeout_s is None else heartbeat_timeout_s
    with session_factory()() as db:
        cutoff = db_now(db) - timedelta(seconds=timeout)
        stale = or_(Job.heartbeat_at.is_(None), Job.heartbeat_at < cutoff)
        rows = db.execute(select(Job.id, Job.status, Job.attempts, Job.worker_id)
                          .where(Job.status.in_(ACTIVE), stale).order_by(Job.created_at).limit(_BATCH)).all()
    result = SweepResult()
    for row in rows:
        if row.status == "cancelling":
            if cancel_if_idle(row.id, cutoff):
                result.cancelled.append(row.id)
            continue
        if row.status == "pausing":
            if pause_if_idle(row.id, cutoff):
                result.paused.append(row.id)
            continue
        outcome = requeue_or_fail(row.id, row.attempts, f"the worker running attempt {row.attempts} stopped "
                                  f"heartbeating for over {timeout:.0f} s", worker_id=row.worker_id,
                                  max_attempts=max_attempts, where=[stale])
        if outcome == "queued":
            result.requeued.append(row.id)
        elif outcome == "failed":
            result.failed.append(row.id)
    if result.requeued or result.failed or result.cancelled or result.paused:
        log.warning("lost workers: requeued %s, failed %s, cancelled %s, paused %s", result.requeued, result.failed,
                    result.cancelled, result.paused)
    return result


def requeue_or_fail(job_id: str, attempt: int, message: str, *, worker_id: str | None = None,
                    max_attempts: int = MAX_ATTEMPTS, where: list[Any] | None = None) -> str | None:
    """Attempt `attempt` of a running job lost its worker: back to `queued` (the next attempt
    resumes from the newest checkpoint), or `failed` with `worker_lost` once `max_attempts` started.
    Returns the new status, or None when the job had already moved on."""
    fence = [Job.attempts == attempt, *(where or [])]
    with session_factory()() as db:
        paused = pause_history(db, job_id).attempts
    if attempt - paused >= max_attempts:
        error = {"code": "worker_lost", "message": f"{message}; gave up after {attempt} attempts"}
        done = transition(job_id, "failed", expect=("running",), where=fence,
                          values={"error": error, "finished_at": utcnow()}, before=[("job.error", error)],
                          after=[("job.done", {"status": "failed"})])
        return "failed" if done else None
    warning = {"code": "worker_lost", "message": f"{message}; re-queued to resume from its latest checkpoint",
               "data": {"attempt": attempt, "worker_id": worker_id}}
    done = transition(job_id, "queued", expect=("running",), where=fence,
                      values={"dispatched_at": None, "worker_id": None, "heartbeat_at": None,
                              "controller_heartbeat_at": None},
                      before=[("job.warning", warning)])
    return "queued" if done else None


def fair_order(rows: list[Any], busy: dict[str, int] | None = None) -> list[Any]:
    """Round-robin over the projects, each project's jobs oldest first (`rows`, with `project_id`,
    come oldest first). Projects with fewer jobs running or sent (`busy`) go first, then the one
    whose oldest job is oldest."""
    by_project: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        by_project[row.project_id].append(row)  # dicts keep insertion order: oldest job's project first
    ranked = sorted(by_project, key=lambda p: (busy or {}).get(p, 0))  # stable: oldest first among equals
    queues = [by_project[p] for p in ranked]
    return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]


def dispatch_pending(*, max_running: int | None = None,
                     redispatch_after_s: float = REDISPATCH_AFTER_S) -> list[str]:
    """Send undispatched queued jobs, fairly between projects, within their project's free running
    slots and the cluster's free capacity (see the module docstring)."""
    limit = settings.MAX_RUNNING_JOBS_PER_PROJECT if max_running is None else max_running
    fresh = utcnow() - timedelta(seconds=redispatch_after_s)
    with session_factory()() as db:
        # Without specs: a pass reads the spec only of the jobs it weighs against the free capacity (those
        # it sends and the first that does not fit), not of every queued job: over 500 queued PPO jobs
        # on a full cluster, 31 -> 8 ms of CPU per pass (`bench.dispatch`), which a woken sweeper may
        # run four times a second.
        pending = db.execute(select(Job.id, Job.project_id, Job.dispatched_at, Job.queue_reason)
                             .where(Job.status == "queued", or_(Job.dispatched_at.is_(None), Job.dispatched_at < fresh))
                             .order_by(Job.created_at, Job.id).limit(_BATCH)).all()
        if not pending:
            return []
        projects = {row.project_id for row in pending}
        busy = dict(db.execute(
            select(Job.project_id, func.count()).where(Job.project_id.in_(projects), or_(
                Job.status.in_(ACTIVE), (Job.status == "queued") & (Job.dispatched_at >= fresh)))
            .group_by(Job.project_id)).all())
        nodes = fresh_nodes(db)
        # Sent but not claimed yet: not in the published free capacity, but it will be taken.
        in_flight = db.scalars(select(Job.spec).where(Job.status == "queued", Job.dispatched_at >= fresh)
                               .limit(_BATCH)).all() if nodes else []
    free = [(n.cpus_available, n.gpus_available) for n in nodes] if nodes else None
    for spec in in_flight:
        free = place(job_demand(spec or {}), free) or free  # one that will not fit is deferred by its worker
    sent: list[str] = []
    waiting: list[str] = []
    for row in fair_order(pending, busy):
        if busy.get(row.project_id, 0) >= limit:
            continue
        if free is not None:
            left = None if waiting else place(job_demand(_spec(row.id)), free)
            if left is None:
                waiting.append(row.id)
                continue
        outcome = send_job(row.id, previous=row.dispatched_at)
        if outcome is False:
            break  # the broker is down: try again next sweep
        if outcome:
            sent.append(row.id)
            busy[row.project_id] = busy.get(row.project_id, 0) + 1
            if free is not None:
                free = left
    reasons = {row.id: row.queue_reason for row in pending}
    set_queue_reason([j for j in waiting if reasons[j] != WAITING_FOR_RESOURCES], WAITING_FOR_RESOURCES)
    set_queue_reason([j for j in sent if reasons[j] is not None], None)
    if sent:
        log.info("dispatched %d queued job(s): %s", len(sent), sent)
    return sent


def _spec(job_id: str) -> dict[str, Any]:
    with session_factory()() as db:
        return db.scalar(select(Job.spec).where(Job.id == job_id)) or {}


def set_queue_reason(job_ids: list[str], reason: str | None) -> None:
    """Note why these queued jobs wait (None: they no longer do)."""
    if not job_ids:
        return
    with session_factory()() as db:
        db.execute(update(Job).where(Job.id.in_(job_ids), Job.status == "queued").values(queue_reason=reason)
                   .execution_options(synchronize_session=False))
        db.commit()


class Sweeper(threading.Thread):
    """`sweep_once` every `interval_s` in a daemon thread until `stop()`, and a dispatch pass whenever
    PostgreSQL says a queued job awaits dispatch (`workers.wakeup`).

    After the database was unreachable it waits one heartbeat timeout (database reachable again)
    before it judges heartbeats again: the workers could not beat during the outage, and a healthy
    job must not be re-queued for that. Dispatching goes on meanwhile."""

    def __init__(self, interval_s: float = SWEEP_INTERVAL_S, heartbeat_timeout_s: float | None = None) -> None:
        super().__init__(daemon=True, name="keel-sweeper")
        self.interval_s = interval_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self._stop_event = threading.Event()
        self._nudge = threading.Event()
        """Set by a wake-up, and by `stop()`."""
        self.wakeup = for_database(self._nudge.set)
        """Its listener (`workers.wakeup`), started with the thread; None on SQLite."""
        self._outage = False
        self._judge_after = 0.0
        """`time.monotonic()` before which heartbeats are not judged."""

    def sweep(self) -> SweepResult | None:
        """One pass; None while the database is unreachable."""
        timeout = (settings.WORKER_HEARTBEAT_TIMEOUT_S if self.heartbeat_timeout_s is None
                   else self.heartbeat_timeout_s)
        try:
            with session_factory()() as db:
                db_now(db)  # is the database there?
            if self._outage:
                self._outage = False
                self._judge_after = time.monotonic() + timeout
                log.warning("the database is back: heartbeats are judged again in %.0f s", timeout)
            return sweep_once(heartbeat_timeout_s=timeout, judge_heartbeats=time.monotonic() >= self._judge_after)
        except DBAPIError as exc:
            if not self._outage:
                log.warning("the database is unreachable (%s): no heartbeat is judged until it is back "
                            "and %.0f s have passed", exc.__class__.__name__, timeout)
            self._outage = True
            return None

    def dispatch(self) -> list[str] | None:
        """A dispatch pass alone (a wake-up's); None while the database is unreachable."""
        try:
            return dispatch_pending()
        except DBAPIError:
            return None  # the periodic pass notices and reports the outage

    def run(self) -> None:
        log.info("sweeper started (every %.1f s, and when a queued job awaits dispatch)", self.interval_s)
        if self.wakeup is not None:
            self.wakeup.start()
        try:
            self._loop()
        finally:
            if self.wakeup is not None:
                self.wakeup.stop()

    def _loop(self) -> None:
        due = 0.0  # of the next periodic pass (`time.monotonic()`)
        while not self._stop_event.is_set():
            now = time.monotonic()
            # No notification can come (SQLite, or the listener reconnecting): look every WAKEUP_GAP_S.
            polling = self.wakeup is None or not self.wakeup.listening.is_set()
            woken = self._nudge.is_set() or polling
            self._nudge.clear()
            try:
                if now >= due:
                    due = now + self.interval_s  # first: a pass that raises waits its interval too
                    self.sweep()
                elif woken:
                    self.dispatch()
            except Exception:  # anything else: log it and keep sweeping
                log.exception("sweep failed")
            # At most one woken pass per WAKEUP_GAP_S: a job that goes back to awaiting dispatch at
            # once (a worker that defers it, a broker that refuses it) is not sent in a tight loop.
            if self._stop_event.wait(min(WAKEUP_GAP_S, max(0.0, due - time.monotonic()))):
                return
            if not polling:
                self._nudge.wait(max(0.0, due - time.monotonic()))

    def stop(self, timeout: float = 10.0) -> None:
        self._stop_event.set()
        self._nudge.set()
        self.join(timeout)
