"""Checkpoint and model directories in the artifact store, as the API and the workers see them (no
torch): where a checkpoint's Hugging Face export is, retention, and removal.

A checkpoint directory (`engine.runtime.checkpoint`) holds the training state and, in `hf/`, the model as a
Hugging Face directory; a PPO checkpoint holds one such part per role (`actor/`, `critic/`). A
directory is recorded by location: an absolute path, a URL of a remote store, or a key.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fsspec
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from core.config import settings
from core.models import Checkpoint, Model
from core.references import users
from core.storage import COMPLETE_MARKER, Storage, get_storage, is_url

log = logging.getLogger(__name__)

HF_EXPORT = "hf"
"""`engine.runtime.checkpoint.HF_EXPORT` (core never imports the engine)."""
ROLES = ("actor", "critic")
"""Parts of a PPO checkpoint; a supervised checkpoint's model counts as the actor."""


def join(location: str, *parts: str) -> str:
    return "/".join([location.rstrip("/"), *parts])


def export_location(storage: Storage, path: str, role: str = "actor") -> str | None:
    """The Hugging Face export of the checkpoint at `path` for `role`, or None when there is none
    (a checkpoint written before exports existed, a role the job did not have, files gone)."""
    candidates = [join(path, role, HF_EXPORT)] + ([join(path, HF_EXPORT)] if role == "actor" else [])
    for location in candidates:
        fs, full = storage.resolve(location)
        if fs.isfile(f"{full.rstrip('/')}/config.json"):
            return location
    return None


def inside_store(storage: Storage, location: str) -> bool:
    """True when `location` lies in the artifact store: only such directories are ever removed."""
    if not is_url(location) and not os.path.isabs(location):
        return True  # a key
    if is_url(location):
        return location.startswith(storage.fs.unstrip_protocol(storage.root).rstrip("/") + "/")
    return storage.is_local and Path(location).resolve().is_relative_to(Path(storage.root).resolve())


def _resolve(location: str, options: Mapping[str, Any] | None) -> tuple[Any, str]:
    if is_url(location):
        return fsspec.core.url_to_fs(location, **dict(settings.STORAGE_OPTIONS if options is None else options))
    if os.path.isabs(location):
        return fsspec.filesystem("file"), location
    return get_storage().resolve(location)


def remove_tree(location: str, options: Mapping[str, Any] | None = None) -> None:
    """Delete the directory at `location`, its COMPLETE marker first (a reader never takes a half-
    removed checkpoint for a complete one). Missing is fine; errors are logged, never raised: the
    rows are already gone and a leftover directory only costs space."""
    try:
        fs, path = _resolve(location, options)
        path = path.rstrip("/")
        fs.invalidate_cache(path)
        if fs.exists(f"{path}/{COMPLETE_MARKER}"):
            fs.rm(f"{path}/{COMPLETE_MARKER}")
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except Exception as exc:  # noqa: BLE001 - see above
        log.warning("could not remove %s: %s", location, exc)


# --- retention ----------------------------------------------------------------------------------

def retention_limits(spec: Mapping[str, Any] | None) -> tuple[int | None, int | None]:
    """(`trainer.max_actor_ckpt_to_keep`, `trainer.max_critic_ckpt_to_keep`) of a stored job spec."""
    trainer = (((spec or {}).get("method") or {}).get("hyperparameters") or {}).get("trainer") or {}
    limits = (trainer.get("max_actor_ckpt_to_keep"), trainer.get("max_critic_ckpt_to_keep"))
    return tuple(v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None for v in limits)


def prune(db: Session, job_id: str, project_id: str, newest: str, spec: Mapping[str, Any] | None) -> list[str]:
    """Apply the job's retention after its checkpoint at `newest` was added (in the caller's
    transaction): checkpoints beyond `max_actor_ckpt_to_keep`, newest first, lose their rows; those
    beyond `max_critic_ckpt_to_keep` lose their critic part. Checkpoints a queued or running job
    uses, or outside `newest`'s directory, are left alone; the newest is always kept (limits >= 1),
    so the one a resume starts from never goes. Returns the locations to remove after the commit."""
    keep_actor, keep_critic = retention_limits(spec)
    if keep_actor is None and keep_critic is None:
        return []
    db.flush()
    rows = db.execute(select(Checkpoint.id, Checkpoint.path).where(Checkpoint.job_id == job_id)
                      .order_by(Checkpoint.step.desc())).all()
    busy = users(db, project_id, [r.id for r in rows])
    parent = newest.rstrip("/").rsplit("/", 1)[0]
    doomed = []
    for index, (ckpt_id, path) in enumerate(rows):
        if ckpt_id in busy or path.rstrip("/").rsplit("/", 1)[0] != parent:
            continue
        if keep_actor is not None and index >= keep_actor:
            db.execute(delete(Checkpoint).where(Checkpoint.id == ckpt_id))
            doomed.append(path)
        elif keep_critic is not None and index >= keep_critic:
            doomed.append(join(path, "critic"))
    return doomed


def local_export(db: Session, ref: str) -> str | None:
    """The Hugging Face export directory of checkpoint id `ref` when this process can read it as a
    local directory (for config.json-based checks); None otherwise."""
    ckpt = db.get(Checkpoint, ref)
    storage = get_storage()
    location = export_location(storage, ckpt.path) if ckpt is not None else None
    if location is None or is_url(location):
        return None
    return location if os.path.isabs(location) else str(storage.local_path(location)) if storage.is_local else None


def model_location(db: Session, ref: str) -> str:
    """Where a worker loads an already-checked model reference from: a Keel model's recorded path, a
    checkpoint's Hugging Face export, else `ref` itself (a path or a hub id)."""
    if ref.startswith("model-"):
        return db.get(Model, ref).path
    if ref.startswith("ckpt-"):
        return export_location(get_storage(), db.get(Checkpoint, ref).path) or ""
    return ref
