"""Celery tasks: thin adapters over `engine.runtime.jobs.run_job`.

`keel.run_job(job_id)` joins Ray (once per process), re-reads the job and asserts the world before
doing anything (a redelivered or duplicated message is a no-op), claims it (`queued` -> `running`,
attempt + 1), resolves the request, runs it on Ray while a thread heartbeats, and records the
outcome with conditional updates fenced by the attempt number.

A job whose project is at its running limit, that the cluster cannot place right now
(`queue_reason` `waiting_for_resources`, `workers.capacity`), or that arrives while Ray is
unreachable, stays queued with `dispatched_at` null and the task returns at once: the worker is
never blocked, no attempt is spent, and the sweeper sends the job again (when the project has a
free slot and the cluster room). A job bigger than the whole cluster fails without an attempt.

The worker's main process also runs the sweeper (`workers.sweeper`) in a thread, from
`worker_ready` to `worker_shutdown`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from celery.signals import worker_process_init, worker_ready, worker_shutdown
from sqlalchemy import func, select, update

from core import logging as logcontext
from core.clock import db_now, db_now_sql
from core.config import settings
from core.db import get_engine, session_factory
from core.events import append_event, publish
from core.ids import new_id
from core.models import File, Job, Model, Project, utcnow
from engine.config import JobResult
from engine.errors import Cancelled, EngineError, Paused
from engine.runtime import jobs
from engine.runtime.cluster import connect
from workers import metrics as worker_metrics
from workers.capacity import claim_check, publish_soon, start_publisher
from workers.celery_app import celery_app
from workers.dispatch import RELEASED, RUN_JOB_TASK, request_cancel
from workers.failures import log_details, public_error
from workers.integrations import IntegrationMirror
from workers.pauses import pause_history
from workers.reporter import ACTIVE, TERMINAL, DBReporter, Heartbeat, json_safe, retry_db, transition
from workers.resolve import resolve_request
from workers.results import register_files, result_files
from workers.sweeper import Sweeper, requeue_or_fail
from workers.webhooks import WebhookSender

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """This worker's hold on one attempt of a job."""

    job_id: str
    attempt: int
    worker_id: str


@celery_app.task(name=RUN_JOB_TASK, ignore_result=True)
def run_job(job_id: str) -> str:
    """Run one queued job to a terminal state; returns what happened (for the worker's log)."""
    with logcontext.context(job_id=job_id):  # every log line of the run carries the job id
        try:
            return _run_job(job_id)
        finally:
            publish_soon()  # its share is free: the next job need not wait for the periodic publish


def _run_job(job_id: str) -> str:
    try:
        connect(settings.RAY_ADDRESS or None, num_cpus=settings.RAY_NUM_CPUS)  # once per process
    except Exception as exc:  # noqa: BLE001 - an outage is not the job's fault: it waits, no attempt spent
        log.warning("job %s left queued: cannot reach the Ray cluster: %s", job_id, exc)
        _undispatch(job_id)
        return "deferred: the Ray cluster is unreachable"
    start_publisher()
    waiting = admit(job_id)
    if waiting is not None:
        log.info("job %s: %s", job_id, waiting)
        return waiting
    claim = claim_job(job_id)
    if isinstance(claim, str):
        log.info("job %s: %s", job_id, claim)
        return claim
    outcome = execute(claim)
    log.info("job %s attempt %d: %s", job_id, claim.attempt, outcome)
    return outcome


def admit(job_id: str) -> str | None:
    """Check a queued job against the cluster before claiming it: one that cannot be placed now stays
    queued (`waiting_for_resources`, no attempt spent; the sweeper sends it again when there is
    room), one bigger than the whole cluster fails. None: go ahead."""
    with session_factory()() as db:
        row = db.execute(select(Job.status, Job.spec).where(Job.id == job_id)).one_or_none()
    if row is None or row.status != "queued":
        return None  # the claim says why not
    verdict = claim_check(job_id, row.spec or {})
    if verdict.status == "wait":
        def txn() -> None:
            with session_factory()() as db:
                db.execute(update(Job).where(Job.id == job_id, Job.status == "queued")
                           .values(dispatched_at=None, queue_reason=verdict.code)
                           .execution_options(synchronize_session=False))
                db.commit()

        retry_db(txn, what=f"defer job {job_id}")
        return f"deferred: {verdict.message}"
    if verdict.status == "refuse":
        error = {"code": verdict.code, "message": verdict.message, "param": verdict.param}
        done = transition(job_id, "failed", expect=("queued",), values={"finished_at": utcnow(), "error": error,
                                                                        "queue_reason": None},
                          before=[("job.error", error)], after=[("job.done", {"status": "failed"})])
        return f"failed: {verdict.code}" if done else None
    return None


def claim_job(job_id: str) -> Claim | str:
    """`queued` -> `running` for this worker, or a reason (str) not to run the job."""
    token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    tried = False

    def txn() -> Claim | str:
        nonlocal tried
        with session_factory()() as db:
            if tried:  # the previous try may have committed before its answer was lost
                row = db.execute(select(Job.worker_id, Job.attempts).where(Job.id == job_id)).one_or_none()
                if row is not None and row.worker_id == token:
                    return Claim(job_id, row.attempts, token)
            tried = True
            job = db.execute(select(Job.status, Job.project_id).where(Job.id == job_id)).one_or_none()
            if job is None:
                return "no such job"
            if job.status != "queued":
                return job.status  # finished, running elsewhere, or cancelling (handled below)
            # One claim at a time per project, so the running limit holds under concurrent workers.
            db.execute(select(Project.id).where(Project.id == job.project_id).with_for_update(key_share=True))
            running = db.scalar(select(func.count()).select_from(Job)
                                .where(Job.project_id == job.project_id, Job.status.in_(ACTIVE)))
            if running >= settings.MAX_RUNNING_JOBS_PER_PROJECT:
                db.rollback()
                _undispatch(job_id)
                return "deferred: the project is at its running-job limit"
            now = db_now_sql()  # liveness is judged on the database's clock
            attempt = db.scalar(update(Job).where(Job.id == job_id, Job.status == "queued")
                                .values(status="running", attempts=Job.attempts + 1, worker_id=token,
                                        heartbeat_at=now, started_at=func.coalesce(Job.started_at, now),
                                        controller_heartbeat_at=None, queue_reason=None)
                                .returning(Job.attempts).execution_options(synchronize_session=False))
            if attempt is None:
                db.rollback()
                return "claimed by another worker"
            event = append_event(db, job_id, "job.status", {"status": "running"}, commit=False)
            db.commit()
        publish(event)
        return Claim(job_id, attempt, token)

    outcome = retry_db(txn, what=f"claim job {job_id}")
    if outcome == "cancelling" and request_cancel(job_id):  # unless a live worker is stopping it
        return "cancelled before it started"
    if outcome in TERMINAL:
        return f"already {outcome}"
    return outcome


def _undispatch(job_id: str) -> None:
    """Leave a queued job for the sweeper to send again (when its project has a free slot)."""
    def txn() -> None:
        with session_factory()() as db:
            db.execute(update(Job).where(Job.id == job_id, Job.status == "queued").values(dispatched_at=None)
                       .execution_options(synchronize_session=False))
            db.commit()

    retry_db(txn, what=f"undispatch job {job_id}")


def execute(claim: Claim) -> str:
    """Run a claimed attempt and record how it ended."""
    job_id = claim.job_id
    lost = threading.Event()
    reporter = DBReporter(job_id, settings.database_url, redis_url=settings.REDIS_URL, attempt=claim.attempt,
                          storage_options=settings.STORAGE_OPTIONS, heartbeat_s=settings.WORKER_HEARTBEAT_S)
    reporter.bind_stop_event(lost)
    with Heartbeat(job_id, claim.attempt, settings.WORKER_HEARTBEAT_S, on_lost=lost.set,
                   controller_timeout_s=settings.WORKER_HEARTBEAT_TIMEOUT_S):
        try:
            with session_factory()() as db:
                job = db.get(Job, job_id)
                request = resolve_request(db, job)
                if job.started_at is not None:  # trainer.max_duration_s counts earlier attempts (database clock)
                    used = (db_now(db) - job.started_at).total_seconds()
                    used -= pause_history(db, job_id).seconds  # but not time spent paused
                    request = dataclasses.replace(request, time_used_s=max(0.0, used))
                model_name = output_model_name(db, job)
            result = jobs.run_job(request, reporter)
            files = result_files(job, result)
        except Cancelled:
            return finish_cancelled(claim)
        except Paused as err:
            return finish_paused(claim, err.data.get("step"))
        except EngineError as err:
            if err.code == "worker_lost":  # its message may name hosts: tenants get a generic one
                message = f"the job's Ray controller was lost (error id {log_details(job_id, err.code, err)})"
                # A job that was pausing is paused instead: its newest checkpoint is the resume point.
                return requeue_or_fail(job_id, claim.attempt, message) or finish_paused(claim, None)
            return finish_failed(claim, err)
        except Exception as exc:  # noqa: BLE001 - recorded as internal_error; details only in the log
            return finish_failed(claim, exc)
    return finish_succeeded(claim, job, model_name, result, files)


def _fence(claim: Claim) -> list:
    return [Job.attempts == claim.attempt, Job.worker_id == claim.worker_id]


def finish_succeeded(claim: Claim, job: Job, name: str, result: JobResult, files: list[File] | None = None) -> str:
    model_id = new_id("model") if result.model_kind is not None else None  # eval jobs train no model

    def register(db) -> None:
        if model_id is not None:
            db.add(Model(id=model_id, project_id=job.project_id, job_id=job.id, name=name, kind=result.model_kind,
                         format=result.model_format, base_model=job.model, path=result.output_dir))
        if files:
            register_files(db, job.id, files)

    values = {"finished_at": utcnow(), "output_model_id": model_id, "error": None}
    if result.metrics:
        values["latest_metrics"] = json_safe(dict(result.metrics))
    done = transition(claim.job_id, "succeeded", expect=ACTIVE, where=_fence(claim), values=values, then=register,
                      after=[("job.done", {"status": "succeeded"})])
    return f"succeeded: {model_id or 'no output model'}" if done else "finished, but the job had moved on"


def finish_failed(claim: Claim, err: BaseException) -> str:
    error = public_error(claim.job_id, err)  # a system error is logged there, under its error id
    done = transition(claim.job_id, "failed", expect=ACTIVE, where=_fence(claim),
                      values={"finished_at": utcnow(), "error": error}, before=[("job.error", error)],
                      after=[("job.done", {"status": "failed"})])
    return f"failed: {error['code']}" if done else "failed, but the job had moved on"


def finish_cancelled(claim: Claim) -> str:
    done = transition(claim.job_id, "cancelled", expect=ACTIVE, where=_fence(claim),
                      values={"finished_at": utcnow()}, after=[("job.done", {"status": "cancelled"})])
    return "cancelled" if done else "stopped: the job is no longer this attempt's"


def finish_paused(claim: Claim, step: int | None) -> str:
    """`pausing` -> `paused`, the job's resources released (its controller has exited). A cancel that
    came meanwhile wins: the job is `cancelled`."""
    after = [] if step is None else [("job.log", {"message": f"paused after step {step}; a resume continues "
                                                  "from its newest checkpoint"})]
    if transition(claim.job_id, "paused", expect=("pausing",), where=_fence(claim), values=RELEASED, after=after):
        return "paused"
    if transition(claim.job_id, "cancelled", expect=("cancelling",), where=_fence(claim),
                  values={"finished_at": utcnow()}, after=[("job.done", {"status": "cancelled"})]):
        return "cancelled"
    return "stopped: the job is no longer this attempt's"


def output_model_name(db, job: Job) -> str:
    """`<base model name>:<suffix>` (the method when there is no suffix)."""
    if job.model.startswith("model-"):
        base_model = db.get(Model, job.model)
        base = base_model.name if base_model is not None else job.model
    else:
        base = Path(job.model.rstrip("/")).name or job.model
    suffix = (job.spec or {}).get("suffix") or job.method
    return f"{base}:{suffix}"[-200:]


# --- worker process lifecycle ---------------------------------------------------------------------

_sweeper: Sweeper | None = None
_outbox: list = []


@worker_process_init.connect
def _fresh_database_pool(**_: object) -> None:
    """A forked pool process must not share the parent's database connections."""
    get_engine().dispose(close=False)


@worker_ready.connect
def _start_sweeper(**_: object) -> None:
    global _sweeper, _outbox
    _sweeper = Sweeper()
    _sweeper.start()
    _outbox = [WebhookSender(), IntegrationMirror()]  # event-log consumers: webhooks, W&B/TensorBoard/MLflow
    for thread in _outbox:
        thread.start()
    worker_metrics.start()  # KEEL_WORKER_METRICS_PORT: this main process serves the pool's metrics


@worker_shutdown.connect
def _stop_sweeper(**_: object) -> None:
    if _sweeper is not None:
        _sweeper.stop()
    for thread in _outbox:
        thread.stop()
    worker_metrics.stop()
