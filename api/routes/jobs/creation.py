"""`POST /v1/jobs`: a validated job committed as `queued` (the workers' sweepers send it), or its
memory plan with `dry_run`; forks create through `_create` too."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import Query
from sqlalchemy import bindparam, func, insert, select, tuple_
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import Session

from api import memory_plan
from api.deps import CurrentCaller
from api.errors import ApiError, problem_responses
from api.idempotency import Idempotency, IdempotencyDep
from api.responses import model_response
from api.routes.jobs.admission import _resolve
from api.routes.jobs.paths import router
from api.routes.jobs.public import _AHEAD, job_public
from api.schemas.jobs import JobCreate, JobPublic
from api.schemas.memory_plan import MemoryPlan
from core import logging as logcontext
from core.capacity import admission, job_demand
from core.config import settings
from core.db import session_factory
from core.models import Job
from core.security import Caller

log = logging.getLogger(__package__)  # the name the log lines had before the package split


_INSERT_QUEUED = insert(Job.__table__).returning(select(func.count()).where(
    _AHEAD.project_id == bindparam("queued_project_id"), _AHEAD.status == "queued",
    tuple_(_AHEAD.created_at, _AHEAD.id) < tuple_(bindparam("queued_created_at", type_=Job.created_at.type),
                                                 bindparam("queued_id", type_=Job.id.type))).scalar_subquery() + 1)
"""A new queued job's insert, returning its queue position: the queued jobs strictly ahead of it (its
own row is not visible to the statement that writes it), plus itself. Built once."""
_COLUMNS = [(attr.key, attr.columns[0]) for attr in sa_inspect(Job).column_attrs]


def _insert_queued(db: Session, job: Job) -> int:
    """Insert a new queued `job` and return its queue position, in one statement: a Core insert of
    its attributes, which stays out of the session (the unit of work's flush and a separate count
    cost more than the rest of the insert). Attributes left unset get their column's default first,
    as a flush would give them (id, created_at, the empty dicts and counters), so `job` answers for
    the row."""
    for key, column in _COLUMNS:
        if key not in job.__dict__ and column.default is not None:
            default = column.default
            setattr(job, key, default.arg(None) if default.is_callable else default.arg)
    values = {column.key: job.__dict__[key] for key, column in _COLUMNS if key in job.__dict__}
    return int(db.connection().scalar(_INSERT_QUEUED, {**values, "queued_project_id": job.project_id,
                                                       "queued_created_at": job.created_at, "queued_id": job.id}))


_DRY_RUN = Query(description=(
    "Validate the job and return its memory plan (200, `MemoryPlan`: estimated bytes per worker) without "
    "creating, queueing or remembering anything."))


@router.post("", status_code=201, summary="Create a job", response_model=JobPublic,
             responses={200: {"model": MemoryPlan, "description": "`dry_run=true`: the memory plan; nothing "
                              "was created"}, **problem_responses(401, 404, 422, 429)})
def create_job(body: JobCreate, caller: CurrentCaller, idem: IdempotencyDep,
               dry_run: Annotated[bool, _DRY_RUN] = False):
    """Validate a training job, queue it, and return it. A job whose memory plan cannot fit its devices
    is a 422 `will_not_fit`; `dry_run=true` returns the plan instead."""
    # A session of its own, opened and closed in the handler's thread, as `retrieve_job` does: no
    # `SessionDep` generator for FastAPI to run through an exit stack on the event loop.
    with session_factory()() as db:
        return _create(db, body, caller, idem, dry_run)


def _create(db: Session, body: JobCreate, caller: Caller, idem: Idempotency, dry_run: bool,
            forked_from: dict[str, Any] | None = None):
    """`forked_from`: the parent job and checkpoint of a fork (`api.routes.forks`), kept in the spec."""
    project = caller.project
    if not dry_run and (replay := idem.replay(db, project.id)) is not None:
        return replay
    spec, nodes = _resolve(db, project.id, body, dry_run=dry_run)
    if forked_from is not None:
        spec["forked_from"] = forked_from
    verdict = admission(job_demand(spec), nodes, max_cpus=settings.MAX_JOB_CPUS, max_gpus=settings.MAX_JOB_GPUS)
    if verdict.status == "refuse":
        raise ApiError(422, verdict.code, f"{verdict.param}: {verdict.message}.", param=verdict.param)
    plan = memory_plan.job_plan(db, spec)
    if dry_run:
        return memory_plan.dry_run_response(plan)
    memory_plan.refuse_unfit(plan)
    waiting = verdict.status == "wait"
    # Committed undispatched: the workers' sweepers send it (at once, woken by the commit's NOTIFY;
    # `workers.wakeup`), fairly between projects and when the cluster has room.
    job = Job(project_id=project.id, status="queued", method=body.method.type, spec=spec, model=body.model,
              training_file_id=body.training_file, validation_file_id=body.validation_file, seed=body.seed,
              meta=body.metadata, queue_reason=verdict.code if waiting else None, created_by=caller.key_id)
    position = _insert_queued(db, job)
    logcontext.annotate(job_id=job.id)
    log.info("job created: %s", body.method.type)
    public = job_public(job, position, body.method)
    if (replay := idem.commit(db, project.id, 201, public)) is not None:
        return replay
    return model_response(public, 201)
