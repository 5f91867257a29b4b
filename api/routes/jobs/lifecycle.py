"""What changes a job after its create: cancel, pause, resume and delete."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from api import pauses
from api.deps import CurrentProject, SessionDep
from api.errors import ApiError, problem_responses
from api.idempotency import Idempotency, IdempotencyDep
from api.removal import refuse_in_use, remove_files
from api.routes.jobs.paths import OwnedJob, router
from api.routes.jobs.public import _public_one
from api.schemas.jobs import TERMINAL_STATUSES, JobDeleted, JobPublic
from core import events
from core.models import Checkpoint, Job, Model
from core.storage import get_storage
from workers import dispatch

log = logging.getLogger(__package__)  # the name the log lines had before the package split


def _best_effort(name: str, job_id: str) -> None:
    """Call workers.dispatch.<name>(job_id); a broker problem never fails the request (the sweeper retries)."""
    try:
        getattr(dispatch, name)(job_id)
    except Exception as exc:  # noqa: BLE001 - any broker failure: the job stays queued
        log.warning("%s(%s) failed, left to the sweeper: %s", name, job_id, exc)


@router.post("/{job_id}/cancel", summary="Cancel a job", response_model=JobPublic,
             responses=problem_responses(401, 404, 409, 422, 429))
def cancel_job(job: OwnedJob, project: CurrentProject, db: SessionDep, idem: IdempotencyDep):
    """Cancel a queued or paused job at once, or ask a running one to stop (`cancelling`); finished jobs
    are a 409."""
    if (replay := idem.replay(db, project.id)) is not None:
        return replay
    now = datetime.now(UTC)
    # Conditional updates: a worker that starts or finishes the job concurrently cannot be overwritten.
    appended = []
    if db.execute(update(Job).where(Job.id == job.id, Job.status.in_(("queued", "paused")))
                  .values(status="cancelled", finished_at=now)).rowcount:
        appended.append(events.append_event(db, job.id, "job.status", {"status": "cancelled"}, commit=False))
        appended.append(events.append_event(db, job.id, "job.done", {"status": "cancelled"}, commit=False))
    elif db.execute(update(Job).where(Job.id == job.id, Job.status.in_(("running", "pausing")))
                    .values(status="cancelling")).rowcount:
        appended.append(events.append_event(db, job.id, "job.status", {"status": "cancelling"}, commit=False))
    db.refresh(job)
    if not appended and job.status in TERMINAL_STATUSES:
        db.rollback()
        raise ApiError(409, "job_terminal", f"Job {job.id} already {job.status}; it cannot be cancelled.",
                       param="job_id")
    public = _public_one(db, job)
    if (replay := idem.commit(db, project.id, 200, public)) is not None:
        return replay
    for event in appended:
        events.publish(event)
    if appended:
        _best_effort("request_cancel", job.id)
    return public


def _apply(db: Session, project_id: str, idem: Idempotency, job: Job, change: pauses.Change) -> Any:
    public = _public_one(db, job)
    if (replay := idem.commit(db, project_id, 200, public)) is not None:
        return replay
    pauses.after_commit(change)
    return public


@router.post("/{job_id}/pause", summary="Pause a job", response_model=JobPublic,
             responses=problem_responses(401, 404, 409, 422, 429))
def pause_job(job: OwnedJob, project: CurrentProject, db: SessionDep, idem: IdempotencyDep):
    """Pause a running job: it saves a checkpoint of its last finished step, stops and gives its
    resources back (`pausing`, then `paused`). A queued job is `paused` at once; a `pausing` or
    `paused` one is returned unchanged. Any other status is a 409 `job_not_running`."""
    if (replay := idem.replay(db, project.id)) is not None:
        return replay
    return _apply(db, project.id, idem, job, pauses.pause(db, job))


@router.post("/{job_id}/resume", summary="Resume a paused job", response_model=JobPublic,
             responses=problem_responses(401, 404, 409, 422, 429))
def resume_job(job: OwnedJob, project: CurrentProject, db: SessionDep, idem: IdempotencyDep):
    """Queue a paused job again; it continues from the checkpoint it paused at (no step is trained or
    reported twice). Any other status is a 409 `job_not_paused`."""
    if (replay := idem.replay(db, project.id)) is not None:
        return replay
    return _apply(db, project.id, idem, job, pauses.resume(db, job))


@router.delete("/{job_id}", summary="Delete a job", response_model=JobDeleted,
               responses=problem_responses(401, 404, 409, 429))
def delete_job(job: OwnedJob, db: SessionDep):
    """Delete a finished job with its event log and checkpoints (rows and files). Its output model
    stays (its `job_id` becomes null); delete that with `DELETE /v1/models/{id}`. A queued or running
    (or paused) job is a 409 `job_active`; one whose checkpoints a queued or running job uses is a 409
    `in_use`."""
    db.refresh(job, with_for_update=True)
    if job.status not in TERMINAL_STATUSES:
        raise ApiError(409, "job_active", f"Job {job.id} is {job.status}; cancel it or wait for it to finish "
                       "before deleting it.", param="job_id")
    saved = db.execute(select(Checkpoint.id, Checkpoint.path).where(Checkpoint.job_id == job.id)).all()
    refuse_in_use(db, job.project_id, [c.id for c in saved], "job_id")
    # The output directory holds the output model and result files: it goes only when neither exists.
    keep_output = bool(job.result_files) or db.scalar(select(Model.id).where(Model.job_id == job.id).limit(1))
    db.execute(delete(Job).where(Job.id == job.id))  # events and checkpoints cascade; models keep a null job_id
    db.commit()
    storage = get_storage()
    for _, path in saved:
        remove_files(path)
    remove_files(storage.location(f"jobs/{job.id}/checkpoints"))
    if not keep_output:
        remove_files(storage.location(f"jobs/{job.id}/output"))
    log.info("job deleted")
    return JobDeleted(id=job.id)
