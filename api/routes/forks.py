"""Forks: `POST /v1/jobs/{id}/fork` queues a new job that continues the parent's run from one of its
checkpoints, with optional hyperparameter overrides.

A fork is a create: the parent's request (as accepted) with the overrides merged over its method's
hyperparameters and `from_checkpoint` set to the checkpoint, checked and queued by the same code as
`POST /v1/jobs` (`api.routes.jobs`). The worker starts it from that checkpoint exactly as it resumes
a paused job (`workers.resolve`: weights, optimizer and scheduler state, RNG, data position), so a
fork without overrides trains the parent's very steps after the checkpoint. The new job records
`forked_from` {job, checkpoint, step} in its spec: its public answer and its manifest show it.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from pydantic import TypeAdapter, ValidationError
from sqlalchemy import select

from api.deps import CurrentCaller, SessionDep
from api.errors import ApiError, not_found, problem_responses
from api.idempotency import IdempotencyDep
from api.routes.jobs import OwnedJob
from api.routes.jobs.creation import _create
from api.schemas.forks import JobFork
from api.schemas.jobs import JobCreate, JobMethod, JobPublic
from core.models import Checkpoint, Job
from core.storage import get_storage

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

_METHOD = TypeAdapter(JobMethod)


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides` over `base`, nested objects key by key (a value that is not an object replaces)."""
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _checkpoint(db: SessionDep, parent: Job, ref: str | int) -> Checkpoint:
    if isinstance(ref, int):
        ckpt = db.scalar(select(Checkpoint).where(Checkpoint.job_id == parent.id, Checkpoint.step == ref))
        if ckpt is None:
            steps = db.scalars(select(Checkpoint.step).where(Checkpoint.job_id == parent.id)
                               .order_by(Checkpoint.step)).all()
            raise ApiError(404, "not_found", f"checkpoint: job {parent.id} has no checkpoint at step {ref} (it has "
                           f"{', '.join(map(str, steps)) or 'none'}).", param="checkpoint")
    else:
        ckpt = db.get(Checkpoint, ref)
        if ckpt is None or ckpt.project_id != parent.project_id:
            raise not_found("checkpoint", ref, param="checkpoint")
        if ckpt.job_id != parent.id:
            raise ApiError(422, "invalid_checkpoint", f"checkpoint: {ref} is a checkpoint of job {ckpt.job_id}, not "
                           f"of {parent.id}; fork that job instead.", param="checkpoint")
    if not get_storage().is_complete(ckpt.path):
        raise ApiError(422, "invalid_checkpoint", f"checkpoint: the files of {ckpt.id} are gone.", param="checkpoint")
    return ckpt


def _param(loc: tuple[Any, ...]) -> str:
    """A location in the method object as the fork's body names it (`hyperparameters.optim.lr`)."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("sft", "reward_model", "rm_distill", "dpo", "ppo", "distill_policy", "eval"):
        parts = parts[1:]  # the union's tag
    return ".".join(parts)


def _method(parent: Job, overrides: dict[str, Any] | None) -> Any:
    """The parent's method with `overrides` merged over its hyperparameters, validated."""
    method = dict((parent.spec or {}).get("method") or {})
    method["hyperparameters"] = merge(method.get("hyperparameters") or {}, overrides or {})
    try:
        return _METHOD.validate_json(json.dumps(method))  # as a request body is read (lists for tuples)
    except ValidationError as exc:
        errors = exc.errors()
        param = _param(errors[0]["loc"]) if errors else "hyperparameters"
        if not param.startswith("hyperparameters"):
            param = "hyperparameters"
        code = "unknown_parameter" if errors and errors[0]["type"] == "extra_forbidden" else "invalid_request"
        raise ApiError(422, code, f"{param}: {errors[0]['msg'] if errors else 'invalid'}.", param=param,
                       errors=[{"param": _param(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors[:20]]
                       ) from None


@router.post("/{job_id}/fork", status_code=201, summary="Fork a job from a checkpoint", response_model=JobPublic,
             responses=problem_responses(401, 404, 422, 429))
def fork_job(job: OwnedJob, body: JobFork, caller: CurrentCaller, db: SessionDep, idem: IdempotencyDep):
    """Queue a new job that starts from a checkpoint of this one (its weights, optimizer state and data
    position, as a resume would) and runs the rest of the parent's request, with `hyperparameters` merged
    over the parent's. The new job's `forked_from` names the parent and the checkpoint. A checkpoint of
    another job is a 422 `invalid_checkpoint`; overrides that fail validation are 422s at their
    `hyperparameters.` path."""
    if (replay := idem.replay(db, caller.project.id)) is not None:
        return replay
    ckpt = _checkpoint(db, job, body.checkpoint)
    method = _method(job, body.hyperparameters)
    spec = job.spec or {}
    request = {name: spec[name] for name in JobCreate.model_fields if name in spec}
    request.update(model=job.model, training_file=job.training_file_id, validation_file=job.validation_file_id,
                   seed=job.seed, from_checkpoint=ckpt.id)
    try:
        # The merged method itself, not a placeholder: a method's own checks may need its fields (a PPO
        # job's reward, unless it trains on recorded trajectories).
        create = JobCreate.model_validate_json(json.dumps({**request, "method": json.loads(method.model_dump_json())}))
    except ValidationError as exc:  # a parent stored by an older Keel: its request no longer validates
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"])
        raise ApiError(422, "invalid_request", f"{param}: the parent's request no longer validates: {err['msg']}.",
                       param=param) from None
    create.method = method
    forked_from = {"job": job.id, "checkpoint": ckpt.id, "step": ckpt.step}
    return _create(db, create, caller, idem, False, forked_from=forked_from)
