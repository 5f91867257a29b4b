"""Training runs and their checkpoints, as the Tinker client's `RestClient` reads them.

A training run is a Keel trainer (a Tinker training client's, or one made through `/v1/trainers`);
its checkpoints are the models it saved (`api/tinker/paths.py` names them). Deleting a checkpoint
deletes the Keel model and its files, as `DELETE /v1/models/{id}` does. `save_weights_external`
exports the current weights as a checkpoint whose files `external_weights_urls` hands out as signed
links to Keel's own download route (`GET /api/v1/external_weights/...`), which needs no key: the
link's signature, made with the deployment's secret and valid for an hour, is the permission.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import Field
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from api import archive
from api.deps import SessionDep
from api.errors import ApiError
from api.removal import refuse_in_use, remove_files
from api.tinker import paths
from api.tinker.auth import TinkerCaller, TinkerProject
from api.tinker.futures import encoder
from api.tinker.sessions import Lenient
from api.tinker.training import owned_model, submit, user_error
from core.config import settings
from core.models import Model, Project, Trainer, TrainerOperation
from core.storage import get_storage
from core.tinker import TinkerModel
from core.tinker_samplers import TinkerSampler

router = APIRouter(prefix="/api/v1", tags=["tinker"], include_in_schema=False)

LINK_TTL_S = 3600
"""How long an `external_weights_urls` link works."""


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _size(model: Model) -> int | None:
    try:
        return sum(e.size for e in _files(model))
    except OSError:  # the store is unreachable: the size is optional
        return None


def _files(model: Model) -> list[archive.Entry]:
    """What a download of the checkpoint holds: a LoRA save's adapter (PEFT's layout, with the
    tokenizer), a full save's Hugging Face directory."""
    return archive.hf_files(get_storage(), model.path, lora=model.format == "lora", merged=False)


def checkpoint_public(c: paths.Checkpoint, *, size: bool = True) -> dict[str, Any]:
    return {"checkpoint_id": c.checkpoint_id, "checkpoint_type": paths.SEGMENTS[c.segment],
            "time": _iso(c.model.created_at), "tinker_path": c.path,
            "size_bytes": _size(c.model) if size else None, "public": False, "user_metadata": None,
            "expires_at": None}


def run_public(db: Session, trainer: Trainer, mapped: TinkerModel | None) -> dict[str, Any]:
    """A trainer as Tinker's `TrainingRun`; `mapped`: its training client, if a session made it."""
    run_id = mapped.id if mapped else trainer.id
    saved = paths.checkpoints(db, trainer, run_id)
    last = {kind: next((c for c in reversed(saved) if c.segment == kind), None)
            for kind in ("weights", "sampler_weights")}
    lora = trainer.lora or {}
    meta = {str(k): str(v) for k, v in ((mapped.user_metadata if mapped else trainer.meta) or {}).items()}
    return {"training_run_id": run_id, "base_model": mapped.base_model if mapped else trainer.model,
            "model_owner": trainer.project_id,
            "is_lora": bool(trainer.lora), "lora_rank": lora.get("rank") if trainer.lora else None,
            "corrupted": trainer.status == "failed", "last_request_time": _iso(trainer.last_used_at),
            "last_checkpoint": checkpoint_public(last["weights"], size=False) if last["weights"] else None,
            "last_sampler_checkpoint": (checkpoint_public(last["sampler_weights"], size=False)
                                        if last["sampler_weights"] else None),
            "user_metadata": meta or None}


def _run(db: Session, project: Project, run_id: str) -> Trainer:
    trainer = paths.run_trainer(db, project.id, run_id)
    if trainer is None:
        raise ApiError(404, "not_found", f"No training run {run_id!r} in this project.", param="training_run_id")
    return trainer


@router.get("/training_runs")
def list_training_runs(project: TinkerProject, db: SessionDep,
                       limit: Annotated[int, Query(ge=1, le=100)] = 20, offset: Annotated[int, Query(ge=0)] = 0,
                       access_scope: Literal["owned", "accessible"] = "owned", project_id: str | None = None):
    """The project's training runs, newest first (`offset`/`limit`; `cursor.total_count` counts all)."""
    if project_id not in (None, project.id):  # another project's runs are never listed
        return {"training_runs": [], "cursor": {"offset": offset, "limit": limit, "total_count": 0}}
    # The trainers that only serve sampling sessions (`api.tinker.sampling`) train nothing: not runs.
    helpers = select(TinkerSampler.trainer_id).where(TinkerSampler.project_id == project.id)
    where = (Trainer.project_id == project.id) & Trainer.id.not_in(helpers)
    total = db.scalar(select(func.count()).select_from(Trainer).where(where)) or 0
    trainers = db.scalars(select(Trainer).where(where).order_by(Trainer.created_at.desc(), Trainer.id.desc())
                          .offset(offset).limit(limit)).all()
    mapped = {m.trainer_id: m for m in db.scalars(select(TinkerModel).where(
        TinkerModel.trainer_id.in_([t.id for t in trainers])))} if trainers else {}
    runs = [run_public(db, t, mapped.get(t.id)) for t in trainers]
    return {"training_runs": runs, "cursor": {"offset": offset, "limit": limit, "total_count": total}}


@router.get("/training_runs/{run_id}")
def get_training_run(run_id: str, project: TinkerProject, db: SessionDep,
                     access_scope: Literal["owned", "accessible"] = "owned"):
    trainer = _run(db, project, run_id)
    return run_public(db, trainer, db.get(TinkerModel, run_id))


@router.get("/training_runs/{run_id}/checkpoints")
def list_checkpoints(run_id: str, project: TinkerProject, db: SessionDep):
    """Every checkpoint of the run (training, sampler and external), oldest first; unpaginated."""
    trainer = _run(db, project, run_id)
    return {"checkpoints": [checkpoint_public(c) for c in paths.checkpoints(db, trainer, run_id)], "cursor": None}


def _checkpoint(db: Session, project: Project, run_id: str, checkpoint_id: str) -> paths.Checkpoint:
    try:
        return paths.find(db, project.id, f"{paths.SCHEME}{run_id}/{checkpoint_id}", "checkpoint_id")
    except paths.PathError as err:
        raise ApiError(404, "not_found", err.message, param=err.param) from None


@router.delete("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}", status_code=204)
def delete_checkpoint(run_id: str, checkpoint_id: str, project: TinkerProject, db: SessionDep):
    """Delete a checkpoint (its Keel model and files). Refused while a job uses it or its trainer would
    restore from it: a 400, not Tinker's retried 409, since waiting does not change the answer."""
    found = _checkpoint(db, project, run_id, checkpoint_id)
    model = db.get(Model, found.model.id, with_for_update=True)
    try:
        refuse_in_use(db, project.id, [model.id], "checkpoint_id")
    except ApiError as err:
        raise ApiError(400, err.code, err.detail, param=err.param) from None
    location = model.path
    db.execute(delete(Model).where(Model.id == model.id))
    db.commit()
    remove_files(location)
    return Response(status_code=204)


@router.put("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}/ttl", status_code=204)
def set_checkpoint_ttl(run_id: str, checkpoint_id: str, project: TinkerProject, db: SessionDep):
    """Accepted for a checkpoint of the project, and not kept: Keel deletes a checkpoint only when asked
    (the cookbook's download sets one on its temporary export, then deletes the export itself)."""
    _checkpoint(db, project, run_id, checkpoint_id)
    return Response(status_code=204)


# -- exports -----------------------------------------------------------------------------------------

_NAME_LEN = 128 - len(paths.EXPORT_PREFIX)


class SaveWeightsExternal(Lenient):
    model_id: Annotated[str, Field(min_length=1, max_length=80)]
    path: Annotated[str, Field(max_length=300)]
    seq_id: Annotated[int, Field(ge=0, le=2**31 - 1)]
    ttl_seconds: int | None = None
    """Accepted; Keel keeps a checkpoint until it is deleted."""
    age_encryption_recipients: list[str] | None = None


def _export_error(db: Session, trainer: Trainer, body: SaveWeightsExternal) -> dict[str, Any] | None:
    name = body.path
    if not name or len(name) > _NAME_LEN or name.startswith(".") or ".." in name or \
            any(not (ch.isascii() and (ch.isalnum() or ch in "_.-")) for ch in name):
        return user_error(f"path: {name[:200]!r} is not a checkpoint name (1-{_NAME_LEN} letters, digits, '_', '-' "
                          "or '.', not starting with '.')", "path", "invalid_name")
    if body.age_encryption_recipients:
        return user_error("age_encryption_recipients: Keel does not encrypt exports; its download links are "
                          "signed and expire instead (docs/tinker.md)", "age_encryption_recipients",
                          "unsupported_parameter")
    # The save writes `<state root>/sampler_weights/<engine name>`: a live checkpoint there (an export of
    # that name, or a sampler save the client named `external.<name>`) or a save still queued takes it.
    engine_name = paths.EXPORT_PREFIX + name
    live = any(c.model.path.rstrip("/").endswith(f"/sampler_weights/{engine_name}")
               for c in paths.checkpoints(db, trainer))
    pending = db.scalars(select(TrainerOperation.request).where(
        TrainerOperation.trainer_id == trainer.id, TrainerOperation.kind == "save_weights_for_sampler",
        TrainerOperation.status.in_(("queued", "running"))))
    if live or any(isinstance(r, dict) and r.get("name") == engine_name for r in pending):
        return user_error(f"path: this model already has external weights named {name!r}; choose another name",
                          "path", "name_taken")
    return None


@router.post("/save_weights_external")
def save_weights_external(body: SaveWeightsExternal, caller: TinkerCaller, db: SessionDep) -> dict[str, Any]:
    """Export the current weights (a training request of the model, in `seq_id` order) as
    `tinker://<model>/external_weights/<name>`, downloadable with `external_weights_urls`."""
    model = owned_model(db, caller.project.id, body.model_id)
    error = _export_error(db, db.get(Trainer, model.trainer_id), body)
    return submit(db, model, body.seq_id, paths.EXPORT_KIND, "save_weights_for_sampler",
                  {"name": paths.EXPORT_PREFIX + body.path}, error)


@encoder(paths.EXPORT_KIND)
def _export_output(db: Session, op: TrainerOperation, model: TinkerModel) -> dict[str, Any]:
    name = str((op.request or {}).get("name", ""))[len(paths.EXPORT_PREFIX):]
    saved = db.get(Model, (op.result or {}).get("model_id") or "")
    return {"type": "save_weights_external", "path": paths.tinker_path(model.id, "external_weights", name),
            "size_bytes": _size(saved) if saved is not None else None}


# -- downloads ---------------------------------------------------------------------------------------

def _signature(model_id: str, file: str, expires: int) -> str:
    key = hmac.new(settings.SECRET_KEY.encode(), b"keel tinker external weights", hashlib.sha256).digest()
    return hmac.new(key, f"{model_id}\n{file}\n{expires}".encode(), hashlib.sha256).hexdigest()


def download_url(request: Request, model_id: str, file: str, expires: int) -> str:
    base = str(request.base_url).rstrip("/")
    return (f"{base}/api/v1/external_weights/{model_id}/{quote(file)}"
            f"?expires={expires}&signature={_signature(model_id, file, expires)}")


@router.get("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}/external_weights_urls")
def external_weights_urls(run_id: str, checkpoint_id: str, request: Request, project: TinkerProject,
                          db: SessionDep):
    """A signed link per file of the checkpoint (an export; a training or sampler checkpoint works
    too), each valid for an hour."""
    found = _checkpoint(db, project, run_id, checkpoint_id)
    entries = _files(found.model)
    if not entries:
        raise ApiError(404, "model_unavailable", f"The files of {found.path} are no longer available.",
                       param="checkpoint_id")
    expires = int(time.time()) + LINK_TTL_S
    return {"urls": {e.name: download_url(request, found.model.id, e.name, expires) for e in entries},
            "expires": _iso(datetime.fromtimestamp(expires, UTC))}


@router.get("/external_weights/{model_id}/{file:path}")
def download_file(model_id: str, file: str, db: SessionDep,
                  expires: Annotated[int, Query()] = 0, signature: Annotated[str, Query(max_length=64)] = ""):
    """One file of a checkpoint, for the holder of a link `external_weights_urls` signed."""
    # As bytes: compare_digest refuses str with non-ASCII characters (a TypeError, so a 500).
    if not hmac.compare_digest(signature.encode(), _signature(model_id, file, expires).encode()) or \
            expires < time.time():
        raise ApiError(403, "invalid_signature", "This download link is invalid or expired; ask "
                       "external_weights_urls for a new one.", param="signature")
    model = db.get(Model, model_id)
    entry = next((e for e in _files(model) if e.name == file), None) if model is not None else None
    if entry is None:
        raise ApiError(404, "not_found", "The checkpoint or this file of it no longer exists.", param="file")
    storage = get_storage()

    def chunks():
        with storage.open_location(entry.location) as f:
            while chunk := f.read(archive.CHUNK):
                yield chunk

    return StreamingResponse(chunks(), media_type="application/octet-stream",
                             headers={"Content-Length": str(entry.size), **archive.content_disposition(
                                 file.rsplit("/", 1)[-1].replace('"', ""))})
