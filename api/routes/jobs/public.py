"""A job's public shape (`JobPublic`) from its row, and queue positions among the project's queued
jobs."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import bindparam, func, select, tuple_
from sqlalchemy.orm import Session, aliased

from api.schemas.jobs import JobPublic
from core.models import Job


def _unix(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


def _numbers(values: Any) -> dict[str, float]:
    if not isinstance(values, dict):
        return {}
    return {str(k): float(v) for k, v in values.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


def _progress(job: Job) -> dict[str, Any]:
    p = job.progress or {}
    out = {k: p.get(k) if isinstance(p.get(k), int | float) and not isinstance(p.get(k), bool) else None
           for k in ("step", "total_steps", "epoch", "seconds_remaining")}
    for k in ("step", "total_steps", "seconds_remaining"):
        out[k] = None if out[k] is None else int(out[k])
    step, total = out["step"], out["total_steps"]
    if (out["seconds_remaining"] is None and job.status == "running" and job.started_at and step and total
            and total >= step):
        elapsed = (datetime.now(UTC) - job.started_at).total_seconds()
        out["seconds_remaining"] = max(0, int(elapsed / step * (total - step)))
    return out


def _error(error: Any) -> dict[str, Any] | None:
    if not error or not isinstance(error, dict):
        return None
    return {"code": str(error.get("code") or "error"), "message": str(error.get("message") or ""),
            "param": error.get("param") if isinstance(error.get("param"), str) else None,
            "error_id": error.get("error_id") if isinstance(error.get("error_id"), str) else None}


_AHEAD = aliased(Job, name="ahead")


_POSITION_OF_ONE = select(func.count()).select_from(Job).where(
    Job.project_id == bindparam("project_id"), Job.status == "queued",
    tuple_(Job.created_at, Job.id) <= tuple_(bindparam("created_at", type_=Job.created_at.type),
                                             bindparam("job_id", type_=Job.id.type)))
"""Built once, like `_JOB_WITH_POSITION`."""


def queue_positions(db: Session, project_id: str, jobs: list[Job]) -> dict[str, int]:
    """1-based positions of the given queued jobs among the project's queued jobs, oldest first."""
    queued = [j for j in jobs if j.status == "queued"]
    if not queued:
        return {}
    # A range count on ix_job_queue_order per job, not a ranking of the whole queue.
    if len(queued) == 1:  # create / retrieve / cancel: one plain count
        job = queued[0]
        n = db.scalar(_POSITION_OF_ONE, {"project_id": project_id, "created_at": job.created_at, "job_id": job.id})
        return {job.id: int(n)} if n else {}
    position = (select(func.count()).where(_AHEAD.project_id == project_id, _AHEAD.status == "queued",
                                           tuple_(_AHEAD.created_at, _AHEAD.id) <= tuple_(Job.created_at, Job.id))
                .correlate(Job).scalar_subquery())
    rows = db.execute(select(Job.id, position).where(Job.id.in_([j.id for j in queued]),
                                                     Job.project_id == project_id, Job.status == "queued"))
    return {job_id: int(n) for job_id, n in rows}


def job_public(job: Job, queue_position: int | None = None, method: BaseModel | None = None) -> JobPublic:
    """`method`: the validated method the job's spec was dumped from (a create has it), taken as it is
    instead of validating the spec's copy again."""
    spec = job.spec or {}
    return JobPublic(
        id=job.id, status=job.status, method=spec["method"] if method is None else method, model=job.model,
        output_model=job.output_model_id,
        result_files=job.result_files or [],
        training_file=job.training_file_id, validation_file=job.validation_file_id, seed=job.seed,
        suffix=spec.get("suffix"), resources=spec.get("resources") or {}, from_checkpoint=spec.get("from_checkpoint"),
        forked_from=spec.get("forked_from"),
        created_at=_unix(job.created_at), started_at=_unix(job.started_at), finished_at=_unix(job.finished_at),
        progress=_progress(job), queue_position=queue_position if job.status == "queued" else None,
        latest_metrics=_numbers(job.latest_metrics), error=_error(job.error), metadata=job.meta or {},
        attempts=job.attempts, placement=job.placement, created_by=job.created_by,
        queue_reason=job.queue_reason if job.status == "queued" else None,
        integrations=spec.get("integrations") or [])


def _public_one(db: Session, job: Job) -> JobPublic:
    return job_public(job, queue_positions(db, job.project_id, [job]).get(job.id))
