"""Jobs: create (validated and stored; the workers send it), list, retrieve, cancel, pause and resume.

A job row is the contract with the workers: it is committed as `queued` with the validated request
(every hyperparameter filled in) in `spec` and `dispatched_at` null. The API never talks to the
broker on a create: the workers' sweepers send the job, woken by the commit (`workers.wakeup`), so a
broker outage or a slow broker never slows or fails a create. Referenced ids that are not this project's
(files, models, checkpoints) are 404s with `param` naming the field, exactly as unknown ids are.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam
from pydantic import BaseModel
from sqlalchemy import bindparam, case, delete, func, insert, select, tuple_, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import Session, aliased

from api import memory_plan, model_refs, pauses
from api.deps import CurrentCaller, CurrentProject, SessionDep
from api.errors import ApiError, not_found, problem_responses
from api.graders import check_job_grader
from api.idempotency import Idempotency, IdempotencyDep
from api.pagination import AfterQuery, LimitQuery, page_of, paginate
from api.removal import refuse_in_use, remove_files
from api.responses import model_response
from api.schemas.jobs import (
    FILE_PURPOSE,
    TERMINAL_STATUSES,
    EvalMethod,
    JobCreate,
    JobDeleted,
    JobPublic,
    JobsPublic,
    JobStatus,
    PPOMethod,
    RMDistillMethod,
)
from api.schemas.memory_plan import MemoryPlan
from core import events
from core import logging as logcontext
from core.capacity import (
    FRESH,
    NODE_COLUMNS,
    STALE_S,
    Node,
    admission,
    auto_cpus_per_worker,
    job_demand,
    nodes_of,
)
from core.config import settings
from core.dataset_stats import longest_token_chars, min_tokens
from core.db import session_factory
from core.integrations import check_tracking_uri
from core.models import Checkpoint, ClusterNode, File, Job, Model
from core.security import Caller
from core.storage import get_storage
from workers import dispatch

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JobIdPath = Annotated[str, PathParam(max_length=64)]


def owned_job(job_id: JobIdPath, project: CurrentProject, db: SessionDep) -> Job:
    """The path's job if it belongs to the caller's project, else 404 (existence is not revealed)."""
    job = db.get(Job, job_id)
    if job is None or job.project_id != project.id:
        raise not_found("job", job_id, param="job_id")
    logcontext.annotate(job_id=job.id)
    return job


OwnedJob = Annotated[Job, Depends(owned_job)]


# -- references in a create request -------------------------------------------------------------

_FILES = File.__table__.c
_FILE_AND_NODES = (select(_FILES.project_id, _FILES.deleted_at, _FILES.purpose, _FILES.status, *NODE_COLUMNS)
                   .select_from(File.__table__.outerjoin(ClusterNode.__table__, FRESH))
                   .where(_FILES.id == bindparam("file_id")).order_by(NODE_COLUMNS[0]))
"""What `_training_file` checks, and no more (not the file's column stats), with the cluster's fresh
capacity beside it (a row per node, or one with null node columns): one round trip for both, which a
create needs together. Built once, read without the ORM's loading."""


def _training_file(db: Session, project_id: str, file_id: str, method: str, param: str) -> list[Node] | None:
    """Check a file the job reads; returns the cluster's fresh nodes (`core.capacity.fresh_nodes`),
    read in the same statement."""
    # On the session's connection (its transaction): a Core statement needs none of the ORM's execution.
    rows = db.connection().execute(_FILE_AND_NODES, {"file_id": file_id, "max_age_s": STALE_S}).all()
    file = rows[0] if rows else None
    if file is None or file.project_id != project_id or file.deleted_at is not None:
        raise not_found("file", file_id, param=param)
    want = FILE_PURPOSE[method]
    if file.purpose != want:
        raise ApiError(422, "invalid_file_purpose", f"{param}: {file_id} has purpose {file.purpose!r}; "
                       f"method {method!r} needs {want!r}.", param=param)
    if file.status != "processed":
        raise ApiError(422, "file_not_ready", f"{param}: {file_id} is {file.status}, not processed.", param=param)
    return nodes_of(row[4:] for row in rows)


def _checkpoint(db: Session, project_id: str, checkpoint_id: str, method: str) -> Checkpoint:
    ckpt = db.get(Checkpoint, checkpoint_id)
    if ckpt is None or ckpt.project_id != project_id:
        raise not_found("checkpoint", checkpoint_id, param="from_checkpoint")
    source = db.get(Job, ckpt.job_id)
    if source is None or source.method != method:
        raise ApiError(422, "invalid_checkpoint", f"from_checkpoint: {checkpoint_id} belongs to a "
                       f"{source.method if source else 'deleted'} job; continue a {method} job from a {method} "
                       "checkpoint.", param="from_checkpoint")
    return ckpt


_PAIR_METHODS = ("reward_model", "rm_distill", "dpo")
"""Methods whose sequences are capped by `data.max_length` (prompt + chosen / rejected)."""


def default_lengths(window: int, method: str, data: Any) -> dict[str, int]:
    """The lengths a request left out, from the model's context window (as the OpenAI route does):
    the prompt gets up to half the window (at most the engine's 1024), the response the rest (at
    most 2048); pair methods cap `max_length` at the window. Given lengths are kept."""
    given = data.model_fields_set
    out: dict[str, int] = {}
    prompt = data.max_prompt_length if "max_prompt_length" in given else None
    response = data.max_response_length if "max_response_length" in given else None
    if prompt is None:
        prompt = out["max_prompt_length"] = max(1, min(1024, window // 2, window - (response or 0)))
    if response is None:
        out["max_response_length"] = max(1, min(2048, window - prompt))
    if method in _PAIR_METHODS and "max_length" in type(data).model_fields and "max_length" not in given:
        out["max_length"] = min(window, 3072)
    return out


def _check_context(db: Session, body: JobCreate) -> None:
    """Sequences the job would build must fit the model: prompt + response tokens (SFT, PPO), or
    `max_length` (reward models, defaulting to the same sum). Lengths the request left out are
    first derived from the context window (`default_lengths`)."""
    window = model_refs.context_window_of(db, body.model)
    if window is None:
        return
    data, prefix = body.method.hyperparameters.data, "method.hyperparameters.data."
    for name, value in default_lengths(window, body.method.type, data).items():
        setattr(data, name, value)
    if body.method.type in ("reward_model", "rm_distill", "dpo") and data.max_length is not None:
        total, param = data.max_length, prefix + "max_length"
    else:
        total, param = data.max_prompt_length + data.max_response_length, prefix + "max_response_length"
    if total > window:
        raise ApiError(422, "context_too_long", f"{param}: sequences of up to {total} tokens do not fit the "
                       f"model's context window of {window} tokens (its config.json); lower the lengths.",
                       param=param)


def _check_parallel(db: Session, body: JobCreate) -> None:
    """`ulysses_sequence_parallel_size` must divide `resources.num_workers` and the model's attention
    and key/value heads (config.json, when Keel can read it), for SFT, reward models and each PPO
    role (`actor.`, `critic.`, `ref.`). vllm's `rollout.tensor_model_parallel_size` must divide the
    GPUs of one rollout worker."""
    hp, prefix = body.method.hyperparameters, "method.hyperparameters."
    roles = ({"actor.": hp.actor, "critic.": hp.critic, "ref.": hp.ref} if body.method.type == "ppo"
             else {"": hp} if hasattr(hp, "ulysses_sequence_parallel_size") else {})
    config = None
    for role, cfg in roles.items():
        sp, param = cfg.ulysses_sequence_parallel_size, f"{prefix}{role}ulysses_sequence_parallel_size"
        if sp == 1:
            continue
        if body.resources.num_workers % sp:
            raise ApiError(422, "invalid_request", f"{param}: {sp} must divide resources.num_workers "
                           f"({body.resources.num_workers}): the data-parallel size is their quotient.", param=param)
        config = config if config is not None else (model_refs.model_config(db, body.model) or {})
        heads = config.get("num_attention_heads")
        kv = config.get("num_key_value_heads") or heads
        if isinstance(heads, int) and isinstance(kv, int) and (heads % sp or kv % sp):
            raise ApiError(422, "invalid_request", f"{param}: {sp} must divide the model's {heads} attention "
                           f"heads and {kv} key/value heads (its config.json).", param=param)
    if body.method.type == "ppo" and hp.rollout.tensor_model_parallel_size > 1:
        tp, gpus = hp.rollout.tensor_model_parallel_size, body.resources.gpus_per_worker
        if gpus != int(gpus) or int(gpus) % tp:
            param = prefix + "rollout.tensor_model_parallel_size"
            raise ApiError(422, "invalid_request", f"{param}: {tp} must divide the GPUs of a rollout worker "
                           f"(resources.gpus_per_worker {gpus:g}).", param=param)


_FILE_STATS = select(File.stats).where(File.id == bindparam("file_id"))


def _check_rows_fit(db: Session, body: JobCreate) -> None:
    """With `truncation: error`, refuse a job whose file certainly holds a row over a length limit,
    before it is queued: the file's recorded longest cells (characters, `core.dataset_stats`) over the
    most characters one token of the model's tokenizer covers give the fewest tokens that row can take
    (`core.dataset_stats.min_tokens`). With `filter_overlong_prompts` the longest row may be dropped: no
    check."""
    data = body.method.hyperparameters.data
    if data.truncation != "error" or data.filter_overlong_prompts:
        return
    path = model_refs.model_path(db, body.model)
    per_token = longest_token_chars(path) if path else None
    if per_token is None:
        return
    method = body.method.type
    for param, file_id in (("training_file", body.training_file), ("validation_file", body.validation_file)):
        stats = db.scalar(_FILE_STATS, {"file_id": file_id}) if file_id else None
        if not stats:
            continue
        prompt = min_tokens(stats, "prompt", per_token)
        if method in _PAIR_METHODS:
            total = data.max_length or data.max_prompt_length + data.max_response_length
            # The row with the longest cell holds at least that many tokens, plus EOS on a response.
            need = max(prompt, *(min_tokens(stats, c, per_token) + 1 for c in ("chosen", "rejected")))
            limits = [(need, total, "max_length", "prompt + response")]
        else:
            limits = [(prompt, data.max_prompt_length, "max_prompt_length", "prompt")]
            if method == "sft":
                response = min_tokens(stats, "response", per_token) + 1
                limits.append((response, data.max_response_length, "max_response_length", "response"))
                if data.max_length is not None:
                    limits.append((max(prompt, response), data.max_length, "max_length", "prompt + response"))
        for need, limit, name, what in limits:
            if need > limit:
                raise ApiError(422, "invalid_file", f"{param}: a row's {what} has at least {need} tokens (the "
                               f"file's longest cells, at most {per_token} characters a token for this model's "
                               f"tokenizer), more than data.{name}={limit}; raise data.{name}, or set "
                               "data.truncation (left, right, middle) or data.filter_overlong_prompts.",
                               param=param)


def _resolve(db: Session, project_id: str, body: JobCreate) -> tuple[dict[str, Any], list[Node] | None]:
    """Check every reference in the request; returns the spec to store (normalised, defaults filled,
    `cpus_per_worker: auto` resolved against the nodes) and the cluster's fresh nodes (read with the
    training file), which admission reads too."""
    method = body.method
    body.model = model_refs.resolve(db, project_id, body.model, "model")
    _check_context(db, body)
    _check_parallel(db, body)
    nodes = _training_file(db, project_id, body.training_file, method.type, "training_file")
    if body.validation_file is not None:
        _training_file(db, project_id, body.validation_file, method.type, "validation_file")
    _check_rows_fit(db, body)
    if isinstance(method, RMDistillMethod):
        method.teacher = model_refs.resolve(db, project_id, method.teacher, "method.teacher", reward=True)
    if isinstance(method, PPOMethod | EvalMethod) and method.reward.model is not None:
        method.reward.model = model_refs.resolve(db, project_id, method.reward.model, "method.reward.model",
                                                 reward=True)
    if isinstance(method, PPOMethod | EvalMethod) and method.reward.function == "grader":
        method.reward.options = check_job_grader(db, project_id, method.reward.options)
    if isinstance(method, EvalMethod):
        _check_eval(db, project_id, body, method)
    adapter = getattr(method.hyperparameters.model, "lora_adapter_path", None)  # eval has no adapters
    if adapter is not None:
        method.hyperparameters.model.lora_adapter_path = model_refs.model_dir(
            adapter, "method.hyperparameters.model.lora_adapter_path")
    if body.from_checkpoint is not None:
        _checkpoint(db, project_id, body.from_checkpoint, method.type)
    _check_integrations(body)
    spec = body.model_dump(mode="json")
    if body.resources.cpus_per_worker == "auto":  # stored as the number: admission, workers and engine read it
        body.resources.cpus_per_worker = float(auto_cpus_per_worker(
            spec, nodes, cap=settings.AUTO_CPUS_PER_WORKER_MAX, max_cpus=settings.MAX_JOB_CPUS))
        spec["resources"]["cpus_per_worker"] = body.resources.cpus_per_worker
    return spec, nodes


def _check_integrations(body: JobCreate) -> None:
    """One tracker of each type, and MLflow URIs the deployment allows (`core.integrations`)."""
    seen: set[str] = set()
    for i, integration in enumerate(body.integrations):
        if integration.type in seen:
            raise ApiError(422, "invalid_request", f"integrations.{i}: a second {integration.type} integration; "
                           "at most one of each type.", param=f"integrations.{i}.type")
        seen.add(integration.type)
        if integration.mlflow is not None:
            try:
                check_tracking_uri(integration.mlflow.tracking_uri)
            except ValueError as exc:
                param = f"integrations.{i}.mlflow.tracking_uri"
                raise ApiError(422, "invalid_url", f"{param}: {exc}.", param=param) from exc


def _check_eval(db: Session, project_id: str, body: JobCreate, method: EvalMethod) -> None:
    """An evaluation reads one prompts file, and `compare_to` must be a model that generates."""
    if body.validation_file is not None:
        raise ApiError(422, "invalid_request", "validation_file: an eval job evaluates on training_file only; "
                       "leave validation_file out.", param="validation_file")
    if method.compare_to is not None:
        method.compare_to = model_refs.resolve(db, project_id, method.compare_to, "method.compare_to")
        model = db.get(Model, method.compare_to) if method.compare_to.startswith("model-") else None
        if model is not None and model.kind != "policy":
            raise ApiError(422, "invalid_model", f"method.compare_to: {model.id} is a {model.kind}, not a policy.",
                           param="method.compare_to")


# -- the public shape ------------------------------------------------------------------------------

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


_QUEUE_POSITION = case((Job.status == "queued", select(func.count()).where(
    _AHEAD.project_id == Job.project_id, _AHEAD.status == "queued",
    tuple_(_AHEAD.created_at, _AHEAD.id) <= tuple_(Job.created_at, Job.id)).correlate(Job).scalar_subquery()))
"""The selected job's queue position (null unless queued): `queue_positions` as a column, to read it
with the job in one query."""
_JOB_WITH_POSITION = select(Job, _QUEUE_POSITION).where(Job.id == bindparam("job_id"))
"""Built once: SQLAlchemy then computes its cache key once, not on every request (most of the cost
of a statement like this one)."""


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


def _best_effort(name: str, job_id: str) -> None:
    """Call workers.dispatch.<name>(job_id); a broker problem never fails the request (the sweeper retries)."""
    try:
        getattr(dispatch, name)(job_id)
    except Exception as exc:  # noqa: BLE001 - any broker failure: the job stays queued
        log.warning("%s(%s) failed, left to the sweeper: %s", name, job_id, exc)


# -- routes ----------------------------------------------------------------------------------------

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
    spec, nodes = _resolve(db, project.id, body)
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
