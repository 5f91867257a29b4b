"""`tinker://` paths: Tinker's names for checkpoints, resolved to Keel's saved models.

`tinker://<run>/<segment>/<name>`. `<run>` is a training run: a Tinker model id
(`{session_id}:train:{n}`, a `tinker_model` row) or the id of a trainer made through `/v1/trainers`
(`trainer-...`): both are Keel trainers. `<segment>` is `weights` (`save_state`: weights and optimizer
state), `sampler_weights` (`save_weights_for_sampler`: weights only) or `external_weights`
(`save_weights_external`: weights only, downloadable file by file). Every checkpoint is one Keel model
(`model-...`, `trainer_id` its trainer): a `weights` or `sampler_weights` one is found by where the
engine wrote it (`<state root>/<segment>/<name>`); an `external_weights` one is the weights-only save
a `save_weights_external` request queued (`tinker_request.kind`), under the engine name
`EXPORT_PREFIX + <name>`, so that it never shares a directory with the client's sampler saves.

A path that is malformed, names a run of another project or a checkpoint that does not exist is a
`PathError` naming the request field; another project's path reads exactly as a missing one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import Model, Trainer, TrainerOperation
from core.tinker import TinkerModel, TinkerRequest

SCHEME = "tinker://"
SEGMENTS = {"weights": "training", "sampler_weights": "sampler", "external_weights": "external"}
"""A path's middle part -> Tinker's `checkpoint_type`."""
_ENGINE_SEGMENTS = ("weights", "sampler_weights")
"""The directories the engine writes saves into (`engine.interactive.session`)."""
EXPORT_KIND = "save_weights_external"
EXPORT_PREFIX = "external."
"""An export's engine name is this plus the client's name."""


class PathError(Exception):
    """A `tinker://` path that names nothing this project may use; `param` is the request field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message, self.param = message, param


@dataclass(frozen=True)
class Parsed:
    run_id: str
    segment: str
    name: str

    @property
    def checkpoint_id(self) -> str:
        return f"{self.segment}/{self.name}"

    @property
    def checkpoint_type(self) -> str:
        return SEGMENTS[self.segment]


@dataclass(frozen=True)
class Checkpoint:
    """One saved model of a run, as Tinker lists it."""

    model: Model
    run_id: str
    segment: str
    name: str

    @property
    def checkpoint_id(self) -> str:
        return f"{self.segment}/{self.name}"

    @property
    def path(self) -> str:
        return tinker_path(self.run_id, self.segment, self.name)


def tinker_path(run_id: str, segment: str, name: str) -> str:
    return f"{SCHEME}{run_id}/{segment}/{name}"


def parse(path: str, param: str) -> Parsed:
    """The three parts of a `tinker://<run>/<segment>/<name>` path, as the client splits it."""
    parts = path[len(SCHEME):].split("/") if isinstance(path, str) and path.startswith(SCHEME) else []
    if len(parts) != 3 or not all(parts) or parts[1] not in SEGMENTS:
        raise PathError(f"{param}: {str(path)[:300]!r} is not a checkpoint path; expected "
                        "tinker://<training run>/{weights|sampler_weights|external_weights}/<name>.", param)
    return Parsed(*parts)


def run_id_of(db: Session, trainer: Trainer) -> str:
    """The name a trainer's checkpoints use: its Tinker model id, else the trainer id."""
    return db.scalar(select(TinkerModel.id).where(TinkerModel.trainer_id == trainer.id)) or trainer.id


def run_trainer(db: Session, project_id: str, run_id: str) -> Trainer | None:
    """The trainer of a training run, if the run is this project's (another project's: None)."""
    if run_id.startswith("trainer-"):
        trainer = db.get(Trainer, run_id)
    else:
        mapped = db.get(TinkerModel, run_id)
        trainer = db.get(Trainer, mapped.trainer_id) if mapped is not None else None
    return trainer if trainer is not None and trainer.project_id == project_id else None


def _engine_segment(model: Model) -> tuple[str, str] | None:
    """`(segment, name)` from where the engine wrote a save (`.../<segment>/<name>`)."""
    parts = model.path.rstrip("/").rsplit("/", 2)
    return (parts[1], parts[2]) if len(parts) == 3 and parts[1] in _ENGINE_SEGMENTS else None


def checkpoints(db: Session, trainer: Trainer, run_id: str | None = None) -> list[Checkpoint]:
    """A run's checkpoints that still exist, oldest first."""
    run_id = run_id or run_id_of(db, trainer)
    models = db.scalars(select(Model).where(Model.trainer_id == trainer.id).order_by(Model.created_at, Model.id)).all()
    exports = {}
    for request, result in db.execute(
            select(TrainerOperation.request, TrainerOperation.result)
            .join(TinkerRequest, TinkerRequest.operation_id == TrainerOperation.id)
            .where(TrainerOperation.trainer_id == trainer.id, TrainerOperation.status == "succeeded",
                   TinkerRequest.kind == EXPORT_KIND)).all():
        name = (request or {}).get("name", "")
        if isinstance(result, dict) and name.startswith(EXPORT_PREFIX):
            exports[result.get("model_id")] = name[len(EXPORT_PREFIX):]
    out = []
    for model in models:
        if model.id in exports:
            out.append(Checkpoint(model, run_id, "external_weights", exports[model.id]))
        elif (where := _engine_segment(model)) is not None:
            out.append(Checkpoint(model, run_id, *where))
    return out


def find(db: Session, project_id: str, path: str, param: str) -> Checkpoint:
    """The checkpoint a path names, if it is this project's (`PathError` naming `param` otherwise)."""
    parsed = parse(path, param)
    trainer = run_trainer(db, project_id, parsed.run_id)
    found = [c for c in checkpoints(db, trainer, parsed.run_id) if c.checkpoint_id == parsed.checkpoint_id] \
        if trainer is not None else []
    if not found:
        raise PathError(f"{param}: {path!r} is not a checkpoint of this project (deleted, never saved, or "
                        "another project's).", param)
    return found[-1]


def resolve(db: Session, project_id: str, path: str, param: str) -> Model:
    """The Keel model a `tinker://` path names (a job's or trainer's `model`, a load or a sampler)."""
    return find(db, project_id, path, param).model


def path_of_model(db: Session, model: Model) -> str | None:
    """The `tinker://` path of a trainer's saved model (None for a job's model)."""
    trainer = db.get(Trainer, model.trainer_id) if model.trainer_id else None
    if trainer is None:
        return None
    return next((c.path for c in checkpoints(db, trainer) if c.model.id == model.id), None)
