"""`GET /v1/jobs` (the project's jobs, newest first) and `GET /v1/jobs/{job_id}`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from sqlalchemy import bindparam, case, func, select, tuple_

from api.deps import CurrentProject, SessionDep
from api.errors import not_found, problem_responses
from api.pagination import AfterQuery, LimitQuery, page_of, paginate
from api.responses import model_response
from api.routes.jobs.paths import JobIdPath, router
from api.routes.jobs.public import _AHEAD, job_public, queue_positions
from api.schemas.jobs import JobPublic, JobsPublic, JobStatus
from core import logging as logcontext
from core.db import session_factory
from core.models import Job

_QUEUE_POSITION = case((Job.status == "queued", select(func.count()).where(
    _AHEAD.project_id == Job.project_id, _AHEAD.status == "queued",
    tuple_(_AHEAD.created_at, _AHEAD.id) <= tuple_(Job.created_at, Job.id)).correlate(Job).scalar_subquery()))
"""The selected job's queue position (null unless queued): `queue_positions` as a column, to read it
with the job in one query."""
_JOB_WITH_POSITION = select(Job, _QUEUE_POSITION).where(Job.id == bindparam("job_id"))
"""Built once: SQLAlchemy then computes its cache key once, not on every request (most of the cost
of a statement like this one)."""


@router.get("", summary="List jobs", response_model=JobsPublic, responses=problem_responses(401, 422, 429))
def list_jobs(project: CurrentProject, db: SessionDep, limit: LimitQuery = 20, after: AfterQuery = None,
              status: Annotated[JobStatus | None, Query(description="Only jobs in this status.")] = None):
    """The project's jobs, newest first."""
    stmt = select(Job).where(Job.project_id == project.id)
    if status is not None:
        stmt = stmt.where(Job.status == status)
    jobs, has_more = paginate(db, stmt, Job.id, limit=limit, after=after)
    positions = queue_positions(db, project.id, jobs)
    return page_of([job_public(j, positions.get(j.id)) for j in jobs], has_more)


@router.get("/{job_id}", summary="Retrieve a job", response_model=JobPublic,
            responses=problem_responses(401, 404, 429))
def retrieve_job(job_id: JobIdPath, project: CurrentProject):
    """One job, with its progress, latest metrics and queue position."""
    # The hottest read: `owned_job` and `_public_one` in one query, in one thread hop, with a session
    # of its own (no `SessionDep` to set up and close on the event loop).
    with session_factory()() as db:
        row = db.execute(_JOB_WITH_POSITION, {"job_id": job_id}).one_or_none()
    if row is None or row[0].project_id != project.id:
        raise not_found("job", job_id, param="job_id")
    logcontext.annotate(job_id=job_id)
    return model_response(job_public(*row))
