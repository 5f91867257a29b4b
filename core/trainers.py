"""Interactive trainers, as the API and the workers share them (no torch): statuses, operation kinds,
where a trainer's saves live, and its event log.

A trainer's events are committed rows (`trainer_event`, `seq` gap-free per trainer, bumped with
`trainer.last_event_seq`); readers poll the table after their cursor (`GET .../events`, the SSE
stream), so nothing depends on Redis."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from core.models import Trainer, TrainerEvent
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
