"""A job's checkpoints; one checkpoint, its files as a tar streamed on the fly, and deleting it.

A checkpoint's download is a Hugging Face directory (the `hf/` export the engine writes into every
checkpoint, `core.checkpoints`): the policy or reward model of that step, loadable with plain
`transformers`; for PPO the actor's (`role=critic`: the value model). `include=training_state` adds
the training state (weights, optimizer, scheduler, RNG, loop state) under `training_state/`.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse
from sqlalchemy import delete, select

from api import archive
from api.deps import CurrentProject, SessionDep
from api.errors import ApiError, not_found, problem_responses
from api.pagination import AfterQuery, LimitQuery, page_of, paginate
from api.removal import refuse_in_use, remove_files
from api.routes.jobs import OwnedJob
from api.schemas.jobs import CheckpointDeleted, CheckpointPublic, CheckpointsPublic
from core import checkpoints, references
from core.models import Checkpoint, Job
from core.storage import get_storage

router = APIRouter(tags=["checkpoints"])


def owned_checkpoint(checkpoint_id: Annotated[str, PathParam(max_length=64)], project: CurrentProject,
                     db: SessionDep) -> Checkpoint:
    """The path's checkpoint if it belongs to the caller's project, else 404."""
    ckpt = db.get(Checkpoint, checkpoint_id)
    if ckpt is None or ckpt.project_id != project.id:
        raise not_found("checkpoint", checkpoint_id, param="checkpoint_id")
    return ckpt


OwnedCheckpoint = Annotated[Checkpoint, Depends(owned_checkpoint)]


def checkpoint_public(c: Checkpoint) -> CheckpointPublic:
    metrics = {k: float(v) for k, v in (c.metrics or {}).items()
               if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
    return CheckpointPublic(id=c.id, job_id=c.job_id, step=c.step, metrics=metrics, bytes=c.bytes,
                            created_at=int(c.created_at.timestamp()))


@router.get("/v1/jobs/{job_id}/checkpoints", summary="List job checkpoints", response_model=CheckpointsPublic,
            responses=problem_responses(401, 404, 422, 429))
def list_job_checkpoints(job: OwnedJob, db: SessionDep, limit: LimitQuery = 20, after: AfterQuery = None):
    """The job's checkpoints, newest first."""
    rows, has_more = paginate(db, select(Checkpoint).where(Checkpoint.job_id == job.id), Checkpoint.id,
                              limit=limit, after=after)
    return page_of([checkpoint_public(c) for c in rows], has_more)


TAR = {200: {"content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
             "description": "A tar archive of one directory, streamed."}}
_HF_PARTS = tuple(f"{part}/" for part in (checkpoints.HF_EXPORT,
                                           *(f"{role}/{checkpoints.HF_EXPORT}" for role in checkpoints.ROLES)))
"""The exports inside a checkpoint directory: left out of its `training_state/`."""

RoleQuery = Annotated[Literal["actor", "critic"], Query(description=(
    "Whose model: `actor` (the policy; the model of a supervised job) or `critic` (PPO's value model)."))]
MergedQuery = Annotated[bool, Query(description=(
    "LoRA: the merged full weights instead of the adapter (full models: ignored)."))]
IncludeQuery = Annotated[Literal["training_state"] | None, Query(description=(
    "`training_state`: add the checkpoint's training state (weights, optimizer, scheduler, RNG, loop "
    "state) under `training_state/`, to resume elsewhere."))]


@router.get("/v1/checkpoints/{checkpoint_id}", summary="Retrieve a checkpoint", response_model=CheckpointPublic,
            responses=problem_responses(401, 404, 429))
def retrieve_checkpoint(ckpt: OwnedCheckpoint):
    """One checkpoint."""
    return checkpoint_public(ckpt)


@router.get("/v1/checkpoints/{checkpoint_id}/content", summary="Download checkpoint content",
            response_class=StreamingResponse, responses={**TAR, **problem_responses(401, 404, 422, 429)})
def download_checkpoint_content(ckpt: OwnedCheckpoint, role: RoleQuery = "actor", merged: MergedQuery = False,
                                include: IncludeQuery = None):
    """The checkpoint's model as a Hugging Face directory in a tar archive, streamed: `config.json`,
    safetensors weights and tokenizer files, loadable with `AutoModelForCausalLM` (policy),
    `AutoModelForSequenceClassification` (reward model) or `AutoModelForTokenClassification`
    (`role=critic`); a LoRA job's checkpoint gives its adapter (`merged=true`: the merged weights)."""
    # A sync handler, and a sync generator Starlette iterates in a thread: the store's blocking
    # calls never run on the event loop.
    storage = get_storage()
    if not storage.is_complete(ckpt.path):
        raise ApiError(404, "checkpoint_unavailable", f"The files of checkpoint {ckpt.id} are no longer available.",
                       param="checkpoint_id")
    export = checkpoints.export_location(storage, ckpt.path, role)
    entries = [] if export is None else archive.hf_files(
        storage, export, lora=archive.is_lora_export(storage, export), merged=merged)
    if not entries and include is None:
        raise ApiError(404, "checkpoint_unavailable", f"Checkpoint {ckpt.id} holds no Hugging Face export of the "
                       f"{role} (a role the job did not train, or a checkpoint of an older Keel); "
                       "include=training_state gives its training state.", param="role")
    if include == "training_state":
        entries += archive.files(storage, ckpt.path, prefix="training_state",
                                 keep=lambda rel: not rel.startswith(_HF_PARTS))
    stem = "-".join([ckpt.id, *(["critic"] if role == "critic" else []), *(["merged"] if merged else []),
                     *(["training-state"] if include else [])])
    return StreamingResponse(archive.stream(storage, entries, stem), media_type="application/x-tar",
                             headers=archive.content_disposition(f"{stem}.tar"))


@router.delete("/v1/checkpoints/{checkpoint_id}", summary="Delete a checkpoint", response_model=CheckpointDeleted,
               responses=problem_responses(401, 404, 409, 429))
def delete_checkpoint(ckpt: OwnedCheckpoint, db: SessionDep):
    """Delete a checkpoint and its files. Refused (409 `in_use`) while a queued or running job uses it
    (as its model, teacher, reward model or `from_checkpoint`), or may resume from it (the newest
    checkpoint of a job still running)."""
    db.refresh(ckpt, with_for_update=True)
    refuse_in_use(db, ckpt.project_id, [ckpt.id], "checkpoint_id")
    owner = db.get(Job, ckpt.job_id)
    newest = db.scalar(select(Checkpoint.id).where(Checkpoint.job_id == ckpt.job_id)
                       .order_by(Checkpoint.step.desc()).limit(1))
    if owner is not None and owner.status in references.ACTIVE_STATUSES and newest == ckpt.id:
        raise ApiError(409, "in_use", f"Checkpoint {ckpt.id} is the newest of job {owner.id} ({owner.status}), "
                       "which resumes from it if its worker is lost; wait for the job to finish.",
                       param="checkpoint_id")
    path = ckpt.path
    db.execute(delete(Checkpoint).where(Checkpoint.id == ckpt.id))
    db.commit()
    remove_files(path)
    return CheckpointDeleted(id=ckpt.id)

