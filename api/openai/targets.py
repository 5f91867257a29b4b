"""What Serve runs for a completion's `model`: the base weights, a LoRA adapter on them or none, and
the context window. The `model` string is checked as everywhere in Keel (api/model_refs.py: a base
model under the model roots, a Keel model id, an `ft:` name, a checkpoint id, a `tinker://` path);
one that is missing, another project's or not a directory under a model root is OpenAI's 404
`model_not_found`, the same answer for each (existence is not revealed).

A LoRA model Keel trained is its directory's `adapter/` over the weights it was trained from (followed
back through the model or checkpoint it names); a fully trained model is its own base.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from api import model_refs
from api.archive import ADAPTER_DIR
from api.errors import ApiError
from core import checkpoints, fine_tuned_models
from core.db import session_factory
from core.model_shape import read_config
from core.models import Checkpoint, Job, Model
from core.storage import get_storage

_CONFIG_BYTES = 1024**2
"""A config.json larger than this is not read (it names the context window: a few kB)."""


@dataclass(frozen=True)
class Target:
    base_model: str
    """An absolute directory, a storage location or a hub id: where Serve loads the base weights."""
    adapter: str | None
    """The storage location of a LoRA adapter directory, or None."""
    max_model_len: int | None
    """The base model's context window (config.json), None when unknown here."""
    label: str
    """The metrics label: the name of the root base model (never a tenant's model id or name)."""


def model_not_found(ref: str) -> ApiError:
    return ApiError(404, "model_not_found", f"The model {ref[:200]!r} does not exist or you do not have access "
                    "to it.", param="model")


def resolve_target(project_id: str, ref: str) -> Target:
    """The `Target` of `ref` for `project_id` (blocking: run it in a worker thread)."""
    with session_factory()() as db:
        try:
            resolved = model_refs.resolve(db, project_id, ref, "model")
        except ApiError as err:
            if err.status in (404, 422):
                raise model_not_found(ref) from None
            raise
        if resolved.startswith("model-"):
            base, adapter = _model_weights(db, db.get(Model, resolved), ref)
        elif resolved.startswith("ckpt-"):
            base, adapter = _checkpoint_weights(db, db.get(Checkpoint, resolved))
        else:  # a directory under a model root, or a hub id (Serve loads it where the deployment allows)
            base, adapter = resolved, None
            if resolved.startswith("/") and read_config(resolved) is None:
                raise model_not_found(ref)  # a directory, but not a model
        label = fine_tuned_models.base_name(db, resolved)
    return Target(base_model=base, adapter=adapter, max_model_len=model_refs.context_window(_config(base)),
                  label=label)


def _model_weights(db: Session, model: Model, ref: str) -> tuple[str, str | None]:
    if model.kind != "policy":
        raise ApiError(400, "invalid_model", f"{ref[:200]!r} is a {model.kind}, which scores text; only a policy "
                       "model generates.", param="model")
    adapter = _adapter_of(model.path)
    return (checkpoints.model_location(db, model.base_model), adapter) if adapter else (model.path, None)


def _checkpoint_weights(db: Session, ckpt: Checkpoint) -> tuple[str, str | None]:
    export = checkpoints.export_location(get_storage(), ckpt.path) or ""
    adapter = _adapter_of(export)
    job = db.get(Job, ckpt.job_id)
    if adapter and job is not None:
        return checkpoints.model_location(db, job.model), adapter
    return export, None


def _adapter_of(location: str) -> str | None:
    """The LoRA adapter directory of a saved model: its `adapter/` (beside merged weights), or the
    directory itself when it holds only an adapter."""
    storage = get_storage()
    for candidate in (f"{location.rstrip('/')}/{ADAPTER_DIR}", location):
        fs, path = storage.resolve(candidate)
        if fs.isfile(f"{path.rstrip('/')}/adapter_config.json"):
            return candidate
    return None


def _config(location: str) -> dict[str, Any] | None:
    """config.json of the base weights: read from disk, or through the artifact store."""
    if location.startswith("/"):
        return read_config(location)
    # A relative location is a store key (a hub id is not found there: model_refs made sure it shadows
    # nothing Keel holds).
    try:
        fs, path = get_storage().resolve(f"{location.rstrip('/')}/config.json")
        if fs.size(path) > _CONFIG_BYTES:
            return None
        value = json.loads(fs.cat_file(path))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
