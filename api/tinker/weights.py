"""Tinker's weights: `save_weights` (`save_state`), `save_weights_for_sampler`, `load_weights` and
`weights_info`.

Each save or load is a training request of its model (`api.tinker.training.submit`: its `seq_id`, in
order) and a trainer operation of Keel's: `save_weights` is `save_state` (weights and optimizer state),
`save_weights_for_sampler` is Keel's operation of that name (weights only), `load_weights` is
`load_state`. A save writes a Keel model like any trainer save (a job's or trainer's `model`,
downloadable), named `tinker://<model id>/weights/<name>` or `.../sampler_weights/<name>`
(`api.tinker.paths`).

`save_weights_for_sampler` without a name (`save_weights_and_get_sampling_client`) saves under
`sampler-<sampling_session_seq_id>` and answers a sampling session on those weights instead of a path.

`load_weights` takes two forms: on an existing model (`model_id`, `seq_id`: `load_state` and
`load_state_with_optimizer`), and create-via-load (`session_id`, `model_seq_id`: a new training client
made from the checkpoint, `create_training_client_from_state[_with_optimizer]`), whose trainer takes
the saving trainer's base model, adapter, seed and dtype; its load is the model's request 0.
Only `weights/` checkpoints carry the training state a load needs.
"""

from __future__ import annotations

import logging
import re
from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import SessionDep
from api.errors import ApiError
from api.routes.trainers import new_trainer
from api.schemas.trainers import LoraSpec, TrainerCreate
from api.tinker import paths, sampling
from api.tinker.auth import TinkerCaller, TinkerProject
from api.tinker.futures import encoder
from api.tinker.sessions import Lenient, open_session
from api.tinker.training import owned_model, submit, user_error
from core.models import Model, Trainer, TrainerOperation
from core.tinker import TinkerModel, model_id_of
from core.tinker_samplers import TinkerSampler

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1", include_in_schema=False)

SAMPLER_SAVE_PREFIX = "sampler-"
"""The name of a `save_weights_for_sampler` without one: `sampler-<sampling_session_seq_id>`."""
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_SEGMENT = {"save_state": "weights", "save_weights_for_sampler": "sampler_weights"}


class SaveWeights(Lenient):
    model_id: Annotated[str, Field(min_length=1, max_length=80)]
    seq_id: Annotated[int, Field(ge=0, le=2**31 - 1)]
    path: Annotated[str, Field(max_length=300)] | None = None
    ttl_seconds: int | None = None
    """Accepted; Keel keeps a checkpoint until it is deleted."""
    overwrite: bool = False


class SaveWeightsForSampler(Lenient):
    model_id: Annotated[str, Field(min_length=1, max_length=80)]
    seq_id: Annotated[int, Field(ge=0, le=2**31 - 1)]
    path: Annotated[str, Field(max_length=300)] | None = None
    sampling_session_seq_id: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    ttl_seconds: int | None = None


class LoadWeights(Lenient):
    path: Annotated[str, Field(min_length=1, max_length=1000)]
    optimizer: bool = False
    model_id: Annotated[str, Field(min_length=1, max_length=80)] | None = None
    seq_id: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    session_id: Annotated[str, Field(max_length=64)] | None = None
    model_seq_id: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    base_model: Annotated[str, Field(max_length=500)] | None = None
    user_metadata: dict[str, Any] | None = None
    optimizer_config: dict[str, Any] | None = None


class WeightsInfo(Lenient):
    tinker_path: Annotated[str, Field(min_length=1, max_length=1000)]


# -- saves -------------------------------------------------------------------------------------------

def _name_error(db: Session, trainer: Trainer, kind: str, name: str | None, overwrite: bool) -> dict | None:
    """Why `name` cannot be saved to now (None: it can): not a plain name, or taken by a checkpoint of
    this kind (unless `overwrite`: the save replaces it) or by a save still queued."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        return user_error(f"path: {name!r} is not a checkpoint name (1-128 letters, digits, '_', '-' or '.', not "
                          "starting with '.')", "path", "invalid_name")
    segment = _SEGMENT[kind]
    taken = any(c.segment == segment and c.name == name for c in paths.checkpoints(db, trainer))
    pending = db.scalars(select(TrainerOperation.request).where(
        TrainerOperation.trainer_id == trainer.id, TrainerOperation.kind == kind,
        TrainerOperation.status.in_(("queued", "running"))))
    if (taken and not overwrite) or any(isinstance(r, dict) and r.get("name") == name for r in pending):
        return user_error(f"path: this model already has a {segment} checkpoint named {name!r}; choose another "
                          "name" + ("" if taken and not overwrite else " (its save is still running)"),
                          "path", "name_taken")
    return None


@router.post("/save_weights")
def save_weights(body: SaveWeights, caller: TinkerCaller, db: SessionDep) -> dict[str, Any]:
    """`save_state`: weights and optimizer state, `tinker://<model>/weights/<name>`."""
    model = owned_model(db, caller.project.id, body.model_id)
    trainer = db.get(Trainer, model.trainer_id)
    error = _name_error(db, trainer, "save_state", body.path, body.overwrite)
    return submit(db, model, body.seq_id, "save_weights", "save_state", {"name": body.path}, error)


@router.post("/save_weights_for_sampler")
def save_weights_for_sampler(body: SaveWeightsForSampler, caller: TinkerCaller, db: SessionDep) -> dict[str, Any]:
    """Weights only: `tinker://<model>/sampler_weights/<name>`, or without a name a sampling session on
    them (its id is the future's result)."""
    model = owned_model(db, caller.project.id, body.model_id)
    trainer = db.get(Trainer, model.trainer_id)
    if body.path is not None:
        error = _name_error(db, trainer, "save_weights_for_sampler", body.path, False)
        return submit(db, model, body.seq_id, "save_weights_for_sampler", "save_weights_for_sampler",
                      {"name": body.path}, error)
    if body.sampling_session_seq_id is None:
        error = user_error("path: give a name, or sampling_session_seq_id for a sampling session", "path")
        return submit(db, model, body.seq_id, "save_weights_for_sampler", "save_weights_for_sampler", {}, error)
    seq = body.sampling_session_seq_id
    name = f"{SAMPLER_SAVE_PREFIX}{seq}"
    # the sampling session is committed with the save, so the save's answer always finds it
    row = sampling.existing_sampler(db, model.session_id, seq)
    if row is None:  # sampled by the trainer that saves it, as a named sampler save is
        row = sampling.add_sampler(db, session_id=model.session_id, seq_id=seq, project_id=caller.project.id,
                                   trainer=trainer, base_model=model.base_model, model_path=None, model_id=None)
    answer = submit(db, model, body.seq_id, "save_weights_for_sampler", "save_weights_for_sampler", {"name": name},
                    _name_error(db, trainer, "save_weights_for_sampler", name, False))
    row = db.get(TinkerSampler, row.id)
    if row is not None and row.save_operation_id is None:
        row.save_operation_id = answer["request_id"]
        db.commit()
    return answer


def _saved_path(db: Session, op: TrainerOperation, model: TinkerModel) -> str | None:
    name = (op.request or {}).get("name")
    return paths.tinker_path(model.id, _SEGMENT[op.kind], name) if name else None


@encoder("save_weights")
def _save_weights_output(db: Session, op: TrainerOperation, model: TinkerModel) -> dict[str, Any]:
    return {"type": "save_weights", "path": _saved_path(db, op, model)}


@encoder("save_weights_for_sampler")
def _sampler_save_output(db: Session, op: TrainerOperation, model: TinkerModel) -> dict[str, Any]:
    name = (op.request or {}).get("name") or ""
    if name.startswith(SAMPLER_SAVE_PREFIX) and name[len(SAMPLER_SAVE_PREFIX):].isdigit():
        row = sampling.existing_sampler(db, model.session_id, int(name[len(SAMPLER_SAVE_PREFIX):]))
        if row is not None and row.save_operation_id == op.id:
            return {"type": "save_weights_for_sampler", "sampling_session_id": row.id}
    return {"type": "save_weights_for_sampler", "path": _saved_path(db, op, model)}


# -- loads -------------------------------------------------------------------------------------------

def _state(db: Session, project_id: str, path: str) -> paths.Checkpoint:
    """The `weights/` checkpoint a load names; `PathError` naming `path` otherwise."""
    found = paths.find(db, project_id, path, "path")
    if found.segment != "weights":
        raise paths.PathError(f"path: {path} holds weights only ({found.segment}); load a checkpoint of "
                              "save_state (tinker://<run>/weights/<name>).", "path")
    return found


def _create_via_load(body: LoadWeights, caller: TinkerCaller, db: Session) -> dict[str, Any]:
    session = open_session(db, caller.project.id, body.session_id)
    model_id = model_id_of(session.id, body.model_seq_id)
    if (existing := db.get(TinkerModel, model_id)) is not None:
        return submit(db, existing, 0, "load_weights", "load_state", {})  # answers the first request's id
    try:
        checkpoint = _state(db, caller.project.id, body.path)
    except paths.PathError as err:
        raise ApiError(404, "not_found", err.message, param=err.param) from None
    source = db.get(Trainer, checkpoint.model.trainer_id)
    named = db.scalar(select(TinkerModel.base_model).where(TinkerModel.trainer_id == source.id))
    spec = TrainerCreate(model=source.model, seed=source.seed, dtype=source.dtype,
                         lora=LoraSpec.model_validate(source.lora) if source.lora else None,
                         metadata={"tinker_model_id": model_id, "loaded_from": checkpoint.path})
    trainer = new_trainer(db, caller.project.id, caller.key_id, spec, param="path")
    model = TinkerModel(id=model_id, session_id=session.id, model_seq_id=body.model_seq_id, trainer_id=trainer.id,
                        project_id=caller.project.id, base_model=body.base_model or named or source.model,
                        user_metadata=body.user_metadata or {})
    db.add(model)
    db.flush()
    log.info("tinker model %s is trainer %s, loaded from %s", model_id, trainer.id, checkpoint.path)
    return submit(db, model, 0, "load_weights", "load_state", {"path": checkpoint.model.id,
                                                               "optimizer": body.optimizer})


@router.post("/load_weights")
def load_weights(body: LoadWeights, caller: TinkerCaller, db: SessionDep) -> dict[str, Any]:
    """Load a `weights/` checkpoint of this project into a model (with its optimizer state when
    `optimizer`), or make a new model from it (`session_id` and `model_seq_id`)."""
    if body.model_id is None:
        if body.session_id is None or body.model_seq_id is None:
            raise ApiError(422, "invalid_request", "Give model_id and seq_id (a load into a model) or session_id and "
                           "model_seq_id (a new model from the checkpoint).", param="model_id")
        return _create_via_load(body, caller, db)
    model = owned_model(db, caller.project.id, body.model_id)
    seq_id = body.seq_id if body.seq_id is not None else -1
    try:
        checkpoint, error = _state(db, caller.project.id, body.path), None
    except paths.PathError as err:
        checkpoint, error = None, user_error(err.message, err.param, "invalid_path")
    request = {"path": checkpoint.model.id, "optimizer": body.optimizer} if checkpoint else {}
    return submit(db, model, seq_id, "load_weights", "load_state", request, error)


@encoder("load_weights")
def _load_output(db: Session, op: TrainerOperation, model: TinkerModel) -> dict[str, Any]:
    loaded = db.get(Model, (op.request or {}).get("path") or "")
    return {"type": "load_weights", "model_id": model.id,
            "path": paths.path_of_model(db, loaded) if loaded is not None else None}


# -- weights_info ------------------------------------------------------------------------------------

@router.post("/weights_info")
def weights_info(body: WeightsInfo, project: TinkerProject, db: SessionDep) -> dict[str, Any]:
    """What a checkpoint is: its base model and adapter (how a client recreates its training client)."""
    try:
        checkpoint = paths.find(db, project.id, body.tinker_path, "tinker_path")
    except paths.PathError as err:
        raise ApiError(404, "not_found", err.message, param=err.param) from None
    trainer = db.get(Trainer, checkpoint.model.trainer_id)
    named = db.scalar(select(TinkerModel.base_model).where(TinkerModel.trainer_id == trainer.id))
    lora = trainer.lora or {}
    targets = lora.get("target_modules", "all-linear")
    every = targets == "all-linear"
    return {"base_model": named or trainer.model, "is_lora": bool(trainer.lora), "lora_rank": lora.get("rank"),
            "train_mlp": every or "up_proj" in targets if lora else None,
            "train_attn": every or "q_proj" in targets if lora else None,
            "train_unembed": every or "lm_head" in targets if lora else None}
