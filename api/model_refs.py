"""Where a model a request names lives: a Keel model id, an OpenAI `ft:` name, a `tinker://` checkpoint
path, a checkpoint id, a hub id or a directory under a model root, checked (404 for another project's
ids, as for unknown ones) and normalised; and what its config.json says (its context window). Shared by
the jobs, trainers and OpenAI fine-tuning routes and by score_model graders.
"""

from __future__ import annotations

import os
import re
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy.orm import Session

from api.errors import ApiError, not_found
from api.tinker import paths as tinker_paths
from core import checkpoints, fine_tuned_models
from core.config import settings
from core.model_shape import read_config
from core.models import Checkpoint, Job, Model
from core.storage import get_storage

_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def model_dir(ref: str, param: str) -> str:
    """An absolute directory inside a model root (after resolving symlinks), without `..`."""
    if ".." in PurePosixPath(ref).parts or "\x00" in ref:
        raise ApiError(422, "invalid_model", f"{param}: a model path must not contain '..' or a NUL byte.",
                       param=param)
    # os.path rather than pathlib: the same answers, in a third of the time (a create checks this path).
    resolved = os.path.realpath(ref)
    if not any(resolved == root or resolved.startswith(root.rstrip("/") + "/") for root in settings.model_roots):
        raise ApiError(422, "invalid_model", f"{param}: {ref!r} is not under an allowed model root "
                       "(the deployment's KEEL_MODEL_ROOTS).", param=param)
    if not os.path.isdir(resolved):
        raise ApiError(422, "invalid_model", f"{param}: no directory at {ref!r}.", param=param)
    return resolved


def resolve(db: Session, project_id: str, ref: str, param: str, *, reward: bool = False) -> str:
    """Check a model reference; returns it normalised (a directory resolved, an OpenAI `ft:` name or a
    `tinker://` path as the Keel model id it names)."""
    if ref.startswith(tinker_paths.SCHEME):
        try:
            ref = tinker_paths.resolve(db, project_id, ref, param).id
        except tinker_paths.PathError as err:
            raise ApiError(404, "not_found", err.message, param=param) from None
    if ref.startswith(fine_tuned_models.PREFIX):
        named = fine_tuned_models.resolve(db, project_id, ref)
        if named is None:
            raise not_found("model", ref, param=param)
        ref = named.id
    if ref.startswith("model-"):
        model = db.get(Model, ref)
        if model is None or model.project_id != project_id:
            raise not_found("model", ref, param=param)
        if reward and model.kind != "reward_model":
            raise ApiError(422, "invalid_model", f"{param}: {ref} is a {model.kind}, not a reward_model.",
                           param=param)
        return ref
    if ref.startswith("ckpt-"):
        _checkpoint_model(db, project_id, ref, param, reward=reward)
        return ref
    if ref.startswith("/"):
        return model_dir(ref, param)
    if _HUB_ID.fullmatch(ref) and ".." not in ref:
        if _shadows_local_path(ref):
            raise ApiError(422, "invalid_model", f"{param}: {ref!r} names a local directory, not a hub id; name "
                           "Keel's models by id (model-..., ckpt-...) or give an absolute directory under a model "
                           "root.", param=param)
        return ref
    raise ApiError(422, "invalid_model", f"{param}: expected a Keel model id (model-...), a checkpoint id "
                   "(ckpt-...), a tinker:// checkpoint path, a hub id (org/name) or an absolute directory under a "
                   "model root.", param=param)


def _shadows_local_path(ref: str) -> bool:
    """Whether a hub-id-shaped `ref` exists relative to a model root or the artifact store: the engine
    would load that directory (`job-<other project's job>/output`) instead of the hub's model."""
    roots = list(settings.model_roots)
    storage = get_storage()
    if storage.is_local:
        store = str(storage.local_path("jobs"))
        roots += [store, os.path.dirname(store)]
    return any(os.path.lexists(os.path.join(root, ref)) for root in roots)


_REWARD_METHODS = ("reward_model", "rm_distill")


def _checkpoint_model(db: Session, project_id: str, ref: str, param: str, *, reward: bool) -> None:
    """A checkpoint used as a model: its Hugging Face export (the actor's, for PPO) must exist."""
    ckpt = db.get(Checkpoint, ref)
    if ckpt is None or ckpt.project_id != project_id:
        raise not_found("checkpoint", ref, param=param)
    source = db.get(Job, ckpt.job_id)
    if reward and (source is None or source.method not in _REWARD_METHODS):
        raise ApiError(422, "invalid_model", f"{param}: {ref} is a checkpoint of a "
                       f"{source.method if source else 'deleted'} job, not of a reward model.", param=param)
    storage = get_storage()
    if not storage.is_complete(ckpt.path) or checkpoints.export_location(storage, ckpt.path) is None:
        raise ApiError(422, "invalid_model", f"{param}: checkpoint {ref} holds no Hugging Face export (its files "
                       "are gone, or an older Keel wrote it).", param=param)


_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
"""config.json fields that name a model's context window, in the order they are looked for."""


def model_path(db: Session, ref: str) -> str | None:
    """The local directory of a model reference (a directory, a Keel model or a checkpoint's export)."""
    return (db.get(Model, ref).path if ref.startswith("model-") else checkpoints.local_export(db, ref)
            if ref.startswith("ckpt-") else ref if ref.startswith("/") else None)


def model_config(db: Session, ref: str) -> dict[str, Any] | None:
    """The config.json of a local model (a directory, a Keel model or a checkpoint's export); None when
    Keel cannot read it here (a hub id, an adapter directory, no or odd config). Shared: read only."""
    path = model_path(db, ref)
    return read_config(path) if path else None


def context_window(config: dict[str, Any] | None) -> int | None:
    """The context window a model's config.json names, if any."""
    values = [config.get(k) for k in _CONTEXT_KEYS] if config else []
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)


def context_window_of(db: Session, ref: str) -> int | None:
    return context_window(model_config(db, ref))
