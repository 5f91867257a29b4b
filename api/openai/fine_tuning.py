"""OpenAI's fine-tuning API over Keel's jobs: the official `openai` client works unchanged against
`base_url=<keel>/v1`. A fine-tuning job IS a Keel job (same row, same id): `supervised` -> `sft`,
`dpo` -> `dpo`, `reinforcement` -> `ppo` with the critic-free `grpo` estimator and the grader as the
rule reward. The OpenAI request, with its `auto` values resolved, is kept in the row's `spec.openai`.

The training file (`purpose=fine-tune`, OpenAI's JSON Lines) is converted to Keel's layout
(core/finetune_files.py) into a derived file of the Keel purpose, deduplicated by content, which is the
Keel job's `training_file` (the request's translation: api/openai/translation.py). Errors carry OpenAI's `error` object and are 400s (api/openai/errors.py).
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import ValidationError
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from api import model_refs, pauses
from api.deps import CurrentCaller, CurrentProject, SessionDep
from api.errors import ApiError, problem_responses
from api.openai.schemas import (
    FineTuneMethod,
    FineTuningCheckpoints,
    FineTuningJob,
    FineTuningJobCreate,
    FineTuningJobEvents,
    FineTuningJobs,
)
from api.openai.translation import _bad, _derived_file, _keel_method
from api.routes.jobs import OwnedJob
from api.routes.jobs.admission import _resolve
from api.routes.jobs.lifecycle import _best_effort
from api.routes.jobs.public import _error, _progress
from api.schemas.jobs import JobCreate
from core import events, fine_tuned_models
from core.capacity import admission, job_demand
from core.config import settings
from core.ids import new_id
from core.models import Checkpoint, File, Job, JobEvent
from core.storage import get_storage

router = APIRouter(prefix="/v1/fine_tuning", tags=["fine_tuning"])

_STATUS = {"queued": "queued", "running": "running", "succeeded": "succeeded", "failed": "failed",
           "cancelling": "running", "cancelled": "cancelled", "paused": "paused", "pausing": "running"}
_UNION_MEMBER = re.compile(r"int|float|str|bool|constrained-\w+|literal\[.*\]|function-.*")
"""Location parts pydantic adds for the members of a union (`n_epochs.int`): not fields."""


# -- the public shape ---------------------------------------------------------------------------------

def _unix(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


def fine_tuning_job(job: Job) -> FineTuningJob:
    spec = job.spec or {}
    db = Session.object_session(job)  # the request's session, which loaded the row
    # A job made by Keel's own API (listed here too) has no OpenAI name: its Keel model id stands in.
    fine_tuned = (fine_tuned_models.openai_name(db, job) if db is not None else None) or job.output_model_id
    oa = spec.get("openai") or {}
    method = oa.get("method") or {"type": job.method, job.method: {"hyperparameters": {}}}
    error = _error(job.error)
    progress = _progress(job)
    finish = None
    if job.status == "running" and progress.get("seconds_remaining") is not None:
        finish = int(datetime.now(UTC).timestamp()) + progress["seconds_remaining"]
    return FineTuningJob(
        id=job.id, created_at=_unix(job.created_at), finished_at=_unix(job.finished_at),
        error={"code": error["code"], "message": error["message"], "param": error["param"]} if error else None,
        fine_tuned_model=fine_tuned,
        hyperparameters=(method.get(method["type"]) or {}).get("hyperparameters", {}), method=method,
        model=oa.get("model") or job.model, organization_id=job.project_id, result_files=job.result_files or [],
        seed=job.seed, status=_STATUS.get(job.status, job.status), trained_tokens=oa.get("trained_tokens"),
        training_file=oa.get("training_file") or job.training_file_id,
        validation_file=oa.get("validation_file", job.validation_file_id), estimated_finish=finish,
        integrations=oa.get("integrations"), metadata=job.meta or None, suffix=spec.get("suffix"), keel_job=job.id)


# -- routes --------------------------------------------------------------------------------------------

@router.post("/jobs", summary="Create a fine-tuning job", response_model=FineTuningJob,
             responses=problem_responses(400, 401, 404, 429))
def create_fine_tuning_job(raw: dict[str, Any], project: CurrentProject, caller: CurrentCaller, db: SessionDep):
    """OpenAI's `fine_tuning.jobs.create`: the job is a Keel job of the mapped method."""
    try:
        body = FineTuningJobCreate.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        param = ".".join(str(p) for p in first["loc"] if not _UNION_MEMBER.fullmatch(str(p))) or None
        raise ApiError(400, "invalid_request", f"{param}: {first['msg']}", param=param) from None
    if body.method is None:
        body.method = FineTuneMethod(type="supervised")
    kind = body.method.type
    body.model = model_refs.resolve(db, project.id, body.model, "model")
    source, training = _derived_file(db, project.id, body.training_file, kind, "training_file")
    validation = (_derived_file(db, project.id, body.validation_file, kind, "validation_file")[1]
                  if body.validation_file else None)
    keel_method, public_method = _keel_method(db, body, source, training, validation)
    try:
        keel_body = JobCreate.model_validate({
            "model": body.model, "training_file": training.id,
            "validation_file": validation.id if validation else None, "method": keel_method,
            "seed": body.seed if body.seed is not None else 0, "suffix": body.suffix,
            "metadata": body.metadata or {},
            "integrations": [i.model_dump(exclude_none=True) for i in body.integrations or []]})
    except ValidationError as e:
        first = e.errors()[0]
        param = "method.keel_overrides" if keel_method["overrides"] else "method"
        loc = [str(p) for p in first["loc"]]
        if "multi_turn" in loc:  # Keel's multi_turn, given under the OpenAI method's hyperparameters
            param = ".".join(["method.reinforcement.hyperparameters", *loc[loc.index("multi_turn"):]])
        raise ApiError(400, "invalid_request", f"{param}: {first['msg']} "
                       f"({'.'.join(str(p) for p in first['loc'])})", param=param) from None
    spec, nodes = _resolve(db, project.id, keel_body)
    spec["openai"] = {"method": public_method, "model": raw.get("model"), "training_file": source.id,
                      "validation_file": body.validation_file,
                      "integrations": [i.model_dump(exclude_none=True) for i in body.integrations or []] or None}
    verdict = admission(job_demand(spec), nodes, max_cpus=settings.MAX_JOB_CPUS, max_gpus=settings.MAX_JOB_GPUS)
    if verdict.status == "refuse":
        raise ApiError(400, verdict.code, f"{verdict.param}: {verdict.message}.", param=verdict.param)
    waiting = verdict.status == "wait"
    job = Job(project_id=project.id, status="queued", method=keel_body.method.type, spec=spec, model=keel_body.model,
              training_file_id=training.id, validation_file_id=validation.id if validation else None,
              seed=keel_body.seed, meta=keel_body.metadata, queue_reason=verdict.code if waiting else None,
              created_by=caller.key_id)
    db.add(job)
    db.commit()  # undispatched: the workers' sweepers send it (see `api.routes.jobs`)
    return fine_tuning_job(job)


@router.get("/jobs", summary="List fine-tuning jobs", response_model=FineTuningJobs,
            responses=problem_responses(400, 401, 429))
def list_fine_tuning_jobs(request: Request, project: CurrentProject, db: SessionDep,
                          after: Annotated[str | None, Query(max_length=64)] = None,
                          limit: Annotated[int, Query(ge=1, le=100)] = 20):
    """Newest first (Keel's jobs too: it is one list); `metadata[k]=v` keeps the jobs whose metadata
    has every such pair."""
    wanted = {}
    for key, value in request.query_params.multi_items():
        if key.startswith("metadata[") and key.endswith("]"):
            wanted[key[len("metadata["):-1]] = value
    stmt = select(Job).where(Job.project_id == project.id)
    if after:
        stmt = stmt.where(Job.id < after)
    stmt = stmt.order_by(Job.id.desc())
    out: list[Job] = []
    for job in db.scalars(stmt.limit(1000 if wanted else limit + 1)):  # metadata is JSON: filtered here
        if all((job.meta or {}).get(k) == v for k, v in wanted.items()):
            out.append(job)
        if len(out) > limit:
            break
    return {"data": [fine_tuning_job(j) for j in out[:limit]], "has_more": len(out) > limit}


@router.get("/jobs/{job_id}", summary="Retrieve a fine-tuning job", response_model=FineTuningJob,
            responses=problem_responses(401, 404, 429))
def retrieve_fine_tuning_job(job: OwnedJob, db: SessionDep):
    """One job; a finished job gets its result file (CSV of step metrics) on first retrieval."""
    _ensure_results(db, job)
    return fine_tuning_job(job)


@router.post("/jobs/{job_id}/cancel", summary="Cancel a fine-tuning job", response_model=FineTuningJob,
             responses=problem_responses(400, 401, 404, 429))
def cancel_fine_tuning_job(job: OwnedJob, project: CurrentProject, db: SessionDep):
    """Keel's cancel; a finished job is a 400 (OpenAI's answer) instead of a 409."""
    appended = []
    if db.execute(update(Job).where(Job.id == job.id, Job.status.in_(("queued", "paused")))
                  .values(status="cancelled", finished_at=datetime.now(UTC))).rowcount:
        appended.append(events.append_event(db, job.id, "job.status", {"status": "cancelled"}, commit=False))
        appended.append(events.append_event(db, job.id, "job.done", {"status": "cancelled"}, commit=False))
    elif db.execute(update(Job).where(Job.id == job.id, Job.status.in_(("running", "pausing")))
                    .values(status="cancelling")).rowcount:
        appended.append(events.append_event(db, job.id, "job.status", {"status": "cancelling"}, commit=False))
    db.commit()
    db.refresh(job)
    if not appended and job.status in ("succeeded", "failed", "cancelled"):
        raise ApiError(400, "job_terminal", f"job_id: job {job.id} already {job.status}; it cannot be cancelled.",
                       param="job_id")
    for event in appended:
        events.publish(event)
    if appended and job.status == "cancelling":
        _best_effort("request_cancel", job.id)
    return fine_tuning_job(job)


@router.post("/jobs/{job_id}/pause", summary="Pause a fine-tuning job", response_model=FineTuningJob,
             responses=problem_responses(400, 401, 404, 429))
def pause_fine_tuning_job(job: OwnedJob, db: SessionDep):
    """Keel's pause (`POST /v1/jobs/{id}/pause`); a job that is not queued or running is a 400."""
    return _committed(db, job, pauses.pause(db, job, error_status=400))


def _committed(db: Session, job: Job, change: pauses.Change) -> FineTuningJob:
    """Commit a pause or resume and answer with the state it committed, read before the change is
    dispatched (a worker may move the job on at once)."""
    db.commit()
    db.refresh(job)
    public = fine_tuning_job(job)
    pauses.after_commit(change)
    return public


@router.post("/jobs/{job_id}/resume", summary="Resume a fine-tuning job", response_model=FineTuningJob,
             responses=problem_responses(400, 401, 404, 429))
def resume_fine_tuning_job(job: OwnedJob, db: SessionDep):
    """Keel's resume (`POST /v1/jobs/{id}/resume`); a job that is not paused is a 400."""
    return _committed(db, job, pauses.resume(db, job, error_status=400))


# -- events, checkpoints, results -------------------------------------------------------------------

_METRIC_NAMES = {"train/loss": "train_loss", "val/loss": "valid_loss", "train/token_accuracy": "train_mean_token_accuracy",
                 "val/token_accuracy": "valid_mean_token_accuracy", "critic/score/mean": "train_mean_reward",
                 "val/reward/mean": "valid_mean_reward", "rewards/accuracies": "train_accuracy"}


def _metrics(values: dict[str, Any]) -> dict[str, float]:
    return {short: float(values[name]) for name, short in _METRIC_NAMES.items()
            if isinstance(values.get(name), int | float) and math.isfinite(values[name])}


def _event_public(job_id: str, e: JobEvent) -> dict[str, Any]:
    d = e.data or {}
    level, kind, data = "info", "message", None
    if e.type == "job.metrics":
        kind = "metrics"
        data = {"step": d.get("step"), "total_steps": d.get("total_steps"), **_metrics(d.get("values") or {}),
                "values": d.get("values") or {}}
        message = f"Step {d.get('step')}/{d.get('total_steps')}: " + ", ".join(
            f"{k}={v:.4g}" for k, v in _metrics(d.get("values") or {}).items())
    elif e.type == "job.status":
        message = f"Job status: {d.get('status')}"
    elif e.type == "job.checkpoint":
        message = f"Checkpoint created at step {d.get('step')}"
    elif e.type in ("job.error", "job.warning"):
        level = "error" if e.type == "job.error" else "warn"
        message = str(d.get("message") or d.get("code"))
    elif e.type == "job.done":
        message = {"succeeded": "The job has successfully completed"}.get(d.get("status"), f"Job {d.get('status')}")
    else:
        message = str(d.get("message") or e.type)
    return {"id": f"ftevent-{job_id}-{e.seq}", "created_at": _unix(e.created_at), "level": level,
            "message": message, "type": kind, "data": data}


@router.get("/jobs/{job_id}/events", summary="List fine-tuning events", response_model=FineTuningJobEvents,
            responses=problem_responses(401, 404, 429))
def list_fine_tuning_events(job: OwnedJob, db: SessionDep, after: Annotated[str | None, Query(max_length=120)] = None,
                            limit: Annotated[int, Query(ge=1, le=1000)] = 20):
    """The job's events, newest first; `after` is the id of the last event of the previous page."""
    stmt = select(JobEvent).where(JobEvent.job_id == job.id)
    if after:
        seq = after.rsplit("-", 1)[-1]
        if not seq.isdigit():
            raise _bad("after", "not an event id of this job")
        stmt = stmt.where(JobEvent.seq < int(seq))
    rows = list(db.scalars(stmt.order_by(JobEvent.seq.desc()).limit(limit + 1)))
    return {"data": [_event_public(job.id, e) for e in rows[:limit]], "has_more": len(rows) > limit}


@router.get("/jobs/{job_id}/checkpoints", summary="List fine-tuning checkpoints",
            response_model=FineTuningCheckpoints, responses=problem_responses(401, 404, 429))
def list_fine_tuning_checkpoints(job: OwnedJob, db: SessionDep,
                                 after: Annotated[str | None, Query(max_length=64)] = None,
                                 limit: Annotated[int, Query(ge=1, le=100)] = 10):
    """The job's checkpoints, newest first. `fine_tuned_model_checkpoint` is the Keel checkpoint id
    (`from_checkpoint` of a Keel job)."""
    stmt = select(Checkpoint).where(Checkpoint.job_id == job.id)
    if after:
        stmt = stmt.where(Checkpoint.id < after)
    rows = list(db.scalars(stmt.order_by(Checkpoint.id.desc()).limit(limit + 1)))
    data = [{"id": c.id, "created_at": _unix(c.created_at), "fine_tuned_model_checkpoint": c.id,
             "fine_tuning_job_id": job.id, "step_number": c.step, "metrics": _checkpoint_metrics(c)}
            for c in rows[:limit]]
    return {"data": data, "has_more": len(rows) > limit, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


def _checkpoint_metrics(c: Checkpoint) -> dict[str, float | None]:
    """OpenAI's checkpoint metrics. Keel's validation always covers the whole validation set, so the
    `full_valid_*` values are the checkpoint step's `valid_*` ones (None when that step did not validate;
    fine-tuning jobs validate and checkpoint at every epoch's end)."""
    m = _metrics(c.metrics or {})
    return {"step": float(c.step), "train_loss": None, "train_mean_token_accuracy": None, "valid_loss": None,
            "valid_mean_token_accuracy": None, "full_valid_loss": m.get("valid_loss"),
            "full_valid_mean_token_accuracy": m.get("valid_mean_token_accuracy"), **m}


def _ensure_results(db: Session, job: Job) -> None:
    """A finished job's step metrics as OpenAI's result CSV, stored once as a `fine-tune-results` file."""
    spec = job.spec or {}
    oa = spec.get("openai")
    if oa is None or job.status not in ("succeeded", "failed", "cancelled") or oa.get("result_file"):
        return
    db.refresh(job, with_for_update=True)  # concurrent first retrievals: one writes the file
    spec = job.spec or {}
    oa = spec["openai"]
    if oa.get("result_file"):
        db.commit()
        return
    rows: dict[int, dict[str, Any]] = {}
    tokens = 0
    for e in db.scalars(select(JobEvent).where(JobEvent.job_id == job.id, JobEvent.type == "job.metrics")
                        .order_by(JobEvent.seq)):
        values = (e.data or {}).get("values") or {}
        step = (e.data or {}).get("step")
        if not isinstance(step, int):
            continue
        m = _metrics(values)
        rows.setdefault(step, {}).update(m)
        t = values.get("train/response_tokens")
        tokens += int(t) if isinstance(t, int | float) and math.isfinite(t) else 0
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = ("train_loss", "train_accuracy", "valid_loss", "valid_mean_token_accuracy")
    writer.writerow(("step", *columns))
    for step in sorted(rows):
        r = rows[step]
        r.setdefault("train_accuracy", r.get("train_mean_token_accuracy"))
        writer.writerow((step, *("" if r.get(c) is None else f"{r[c]:.6g}" for c in columns)))
    data = out.getvalue().encode()
    sha = hashlib.sha256(data).hexdigest()
    # Equal bytes are one file per project and purpose (a unique index): jobs stopped before their first
    # step have the same header-only CSV.
    file_id = db.scalar(select(File.id).where(File.project_id == job.project_id, File.purpose == "fine-tune-results",
                                              File.sha256 == sha, File.deleted_at.is_(None)))
    if file_id is None:
        file_id = new_id("file")
        key = f"files/{job.project_id}/{file_id}"
        with get_storage().writer(key) as f:
            f.write(data)
        db.add(File(id=file_id, project_id=job.project_id, purpose="fine-tune-results",
                    filename=f"{job.id}-results.csv", bytes=len(data), sha256=sha, format="csv", rows=len(rows),
                    columns=["step", *columns], stats={}, status="processed", storage_key=key, meta={"job": job.id}))
    job.result_files = [*(job.result_files or []), file_id]
    job.spec = {**spec, "openai": {**oa, "result_file": file_id, "trained_tokens": tokens or None}}
    db.commit()
