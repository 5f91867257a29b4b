"""Pause and resume, shared by Keel's job routes and OpenAI's fine-tuning routes (which differ only in
the status of a wrong-state error: 409 for Keel, 400 for OpenAI).

Pause: a queued job is `paused` at once (nothing to checkpoint); a running one becomes `pausing`, its
method checkpoints the last finished step and stops at the next step boundary, and the worker marks
it `paused` with its resources released (`workers.tasks.finish_paused`). Pausing a `pausing` or
`paused` job changes nothing. Resume: `paused` -> `queued`, sent to a worker, which resumes it from
its newest checkpoint like any re-queued job: no step is trained or reported twice.

Every change is a conditional UPDATE, so a worker that finishes the job meanwhile is never overwritten.
The caller commits (with its idempotency record), then calls `after_commit`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import update
from sqlalchemy.orm import Session

from api.errors import ApiError
from core import events
from core.models import Job, JobEvent
from workers import dispatch

log = logging.getLogger(__name__)


@dataclass
class Change:
    """What a pause or resume wrote (uncommitted) and what to do once it is committed."""

    job_id: str
    appended: list[JobEvent] = field(default_factory=list)
    then: str | None = None
    """The `workers.dispatch` function to call with the job id after the commit."""


def _set(db: Session, job: Job, change: Change, expect: str, status: str, **values: object) -> bool:
    if not db.execute(update(Job).where(Job.id == job.id, Job.status == expect)
                      .values(status=status, **values)).rowcount:
        return False
    change.appended.append(events.append_event(db, job.id, "job.status", {"status": status}, commit=False))
    return True


def pause(db: Session, job: Job, *, error_status: int = 409) -> Change:
    """Pause `job` (see the module docstring); another state is an `error_status` `job_not_running`."""
    change = Change(job.id)
    if (not _set(db, job, change, "queued", "paused", queue_reason=None, **dispatch.RELEASED)
            and _set(db, job, change, "running", "pausing")):
        change.then = "request_pause"
    db.refresh(job)
    if not change.appended and job.status not in ("pausing", "paused"):
        db.rollback()
        raise ApiError(error_status, "job_not_running", f"job_id: job {job.id} is {job.status}; only a queued "
                       "or running job can be paused.", param="job_id")
    return change


def resume(db: Session, job: Job, *, error_status: int = 409) -> Change:
    """Resume a paused `job`; another state is an `error_status` `job_not_paused`."""
    change = Change(job.id)
    if _set(db, job, change, "paused", "queued", queue_reason=None, dispatched_at=None):
        change.then = "enqueue_job"
    db.refresh(job)
    if not change.appended:
        db.rollback()
        hint = " (it is still saving its checkpoint: resume it once it is paused)" if job.status == "pausing" else ""
        raise ApiError(error_status, "job_not_paused", f"job_id: job {job.id} is {job.status}; only a paused job "
                       f"can be resumed{hint}.", param="job_id")
    return change


def after_commit(change: Change) -> None:
    """Publish the events, then hand the job to the workers; a broker problem never fails the request
    (a `pausing` job is still seen by its worker, a resumed one is sent by the sweeper)."""
    for event in change.appended:
        events.publish(event)
    if change.then is None:
        return
    try:
        getattr(dispatch, change.then)(change.job_id)
    except Exception as exc:  # noqa: BLE001 - any broker or database blip: the sweeper covers it
        log.warning("%s(%s) failed, left to the sweeper: %s", change.then, change.job_id, exc)
