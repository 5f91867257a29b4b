"""Interactive trainers, as the API and the workers share them (no torch): statuses, operation kinds,
where a trainer's saves live, and its event log.

A trainer's events are committed rows (`trainer_event`, `seq` gap-free per trainer, bumped with
`trainer.last_event_seq`); readers poll the table after their cursor (`GET .../events`, the SSE
stream), so nothing depends on Redis."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import exists, or_, select, update
from sqlalchemy.orm import Session

from core.clock import db_now_sql
from core.models import Trainer, TrainerEvent, TrainerOperation
from core.storage import get_storage

STATUSES = ("active", "idle", "released", "deleted", "failed")
ENDED = frozenset({"deleted", "failed"})
"""A trainer in one of these takes no more operations (409)."""
OPERATIONS = ("forward_backward", "forward", "optim_step", "sample", "save_state", "load_state",
              "save_weights_for_sampler")
"""`engine.interactive.OPERATIONS` (core never imports the engine)."""
OPERATION_STATUSES = ("queued", "running", "succeeded", "failed")
OPERATION_DONE = frozenset({"succeeded", "failed"})
EVENT_TYPES = ("trainer.status", "trainer.operation", "trainer.model", "trainer.warning")


def state_root(trainer_id: str) -> str:
    """Where `save_state` / `save_weights_for_sampler` write (a path, or a URL of a remote store)."""
    return get_storage().location(f"trainers/{trainer_id}/saves")


def auto_save_location(trainer_id: str, n: int) -> str:
    """Where the idle release's `n`-th automatic save goes (apart from the user's named saves)."""
    return get_storage().location(f"trainers/{trainer_id}/auto/{n}")


def trainer_root(trainer_id: str) -> str:
    return get_storage().location(f"trainers/{trainer_id}")


def append_event(db: Session, trainer_id: str, type: str, data: dict[str, Any] | None = None) -> TrainerEvent:
    """Add an event with the trainer's next `seq` (atomic counter bump) to the caller's transaction."""
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown trainer event type {type!r}")
    seq = db.execute(update(Trainer).where(Trainer.id == trainer_id)
                     .values(last_event_seq=Trainer.last_event_seq + 1)
                     .returning(Trainer.last_event_seq).execution_options(synchronize_session=False)).scalar_one()
    event = TrainerEvent(trainer_id=trainer_id, seq=seq, type=type, data=data or {}, created_at=datetime.now(UTC))
    db.add(event)
    return event


def read_events(db: Session, trainer_id: str, after: int = 0, limit: int = 100) -> list[TrainerEvent]:
    return list(db.scalars(select(TrainerEvent).where(TrainerEvent.trainer_id == trainer_id,
                                                      TrainerEvent.seq > after)
                           .order_by(TrainerEvent.seq).limit(limit)))


def event_public(event: TrainerEvent) -> dict[str, Any]:
    return {"object": "trainer.event", "seq": event.seq, "type": event.type, "data": event.data or {},
            "created_at": int(event.created_at.timestamp()) if event.created_at else 0}


def trainer_users(db: Session, project_id: str, ids: list[str]) -> dict[str, tuple[str, str]]:
    """For each of `ids` (model or checkpoint ids) a live trainer of the project still needs: (trainer id,
    as what): its base `model`, or its last save (`state_path`, where a restore starts)."""
    from core.models import Model

    wanted = set(ids)
    if not wanted:
        return {}
    paths = dict(db.execute(select(Model.path, Model.id).where(Model.id.in_(wanted))).all())
    out: dict[str, tuple[str, str]] = {}
    rows = db.execute(select(Trainer.id, Trainer.model, Trainer.state_path)
                      .where(Trainer.project_id == project_id, Trainer.status.not_in(ENDED)))
    for trainer_id, model, state_path in rows:
        if model in wanted:
            out.setdefault(model, (trainer_id, "its base model"))
        if state_path in paths:
            out.setdefault(paths[state_path], (trainer_id, "its last save (a restore starts there)"))
    return out


# -- LoRA trainers sharing a host ---------------------------------------------------------------------
# The engine keeps every LoRA trainer of one base model (and compute dtype) in one shared host, whose
# operations take turns. Read from the rows here, so the API can tell a client why it waits.

def _host_mates(trainer: Trainer, *conditions: Any):
    """Other live LoRA trainers of `trainer`'s base model and dtype matching `conditions` (the LoRA
    test runs in Python: a JSON null is not SQL NULL on every database)."""
    return (select(Trainer).where(Trainer.id != trainer.id, Trainer.base_model_path == trainer.base_model_path,
                                  Trainer.dtype == trainer.dtype, Trainer.status.not_in(ENDED), *conditions))


def _has_op(status: str):
    return exists().where(TrainerOperation.trainer_id == Trainer.id, TrainerOperation.status == status)


def host_mates_waiting(db: Session, trainer: Trainer) -> bool:
    """Whether another LoRA trainer of `trainer`'s host has operations queued and no worker holding it
    (its task waits in the broker's queue): the drain of `trainer` lets it go first."""
    free = or_(Trainer.lease_until.is_(None), Trainer.lease_until < db_now_sql())
    return any(t.lora for t in db.scalars(_host_mates(trainer, _has_op("queued"), free).limit(20)))


def queue_state(db: Session, trainer: Trainer) -> str:
    """What a client waiting on `trainer`'s queued operations is told: `paused_capacity` while they
    wait behind another trainer's operation in the shared LoRA host, else `active`."""
    if not trainer.lora:
        return "active"
    mine = db.scalar(select(TrainerOperation.status).where(TrainerOperation.trainer_id == trainer.id,
                                                           TrainerOperation.status.in_(("queued", "running")))
                     .order_by(TrainerOperation.status.desc()).limit(1))  # "running" sorts first
    if mine != "queued":
        return "active"
    return "paused_capacity" if any(t.lora for t in db.scalars(_host_mates(trainer, _has_op("running")).limit(20))) \
        else "active"
