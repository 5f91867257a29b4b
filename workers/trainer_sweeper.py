"""The sweeper's part for interactive trainers (run from `workers.sweeper.sweep_once`; no Ray here):

- operations left `running` by a worker that died (the trainer's lease expired) fail with
  `worker_lost` (whether they took effect on the actor is unknown: the caller decides to retry);
- a drain task is (re)sent, through `workers.dispatch.enqueue_trainer`, for every trainer no worker
  holds that has queued operations (their task never sent, or lost with the broker), that was deleted
  but whose actor was not released yet, or that is active and idle past its `idle_timeout_s` (the task
  saves and releases it).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import or_, select, update

from core.clock import db_now
from core.db import session_factory
from core.models import Trainer, TrainerOperation, utcnow
from core.trainers import ENDED
from workers.dispatch import enqueue_trainer

log = logging.getLogger(__name__)

REDISPATCH_AFTER_S = 60.0
"""A drain task sent this long ago that no worker started (lost with the broker) is sent again."""
_BATCH = 200


def sweep_trainers(*, redispatch_after_s: float = REDISPATCH_AFTER_S) -> list[str]:
    """One pass; returns the trainers a task was sent for."""
    with session_factory()() as db:
        now = db_now(db)
        free = or_(Trainer.lease_until.is_(None), Trainer.lease_until < now)
        orphans = select(Trainer.id).where(free)
        lost = db.execute(update(TrainerOperation).where(TrainerOperation.status == "running",
                                                         TrainerOperation.trainer_id.in_(orphans))
                          .values(status="failed", finished_at=now, error={
                              "code": "worker_lost", "param": None, "message": "The worker running this operation "
                              "was lost; whether it took effect is unknown. Check the trainer and retry."})
                          .execution_options(synchronize_session=False)).rowcount
        db.commit()
        queued = set(db.scalars(select(TrainerOperation.trainer_id).join(Trainer, Trainer.id == TrainerOperation.trainer_id)
                                .where(TrainerOperation.status == "queued", free).distinct().limit(_BATCH)))
        ended = set(db.scalars(select(Trainer.id).where(Trainer.status.in_(ENDED), Trainer.released_at.is_(None),
                                                        free).limit(_BATCH)))
        active = db.execute(select(Trainer.id, Trainer.last_used_at, Trainer.idle_timeout_s)
                            .where(Trainer.status == "active", free, Trainer.last_used_at < now - timedelta(seconds=1))
                            .order_by(Trainer.last_used_at).limit(_BATCH)).all()
    idle = {row.id for row in active if row.last_used_at + timedelta(seconds=row.idle_timeout_s) <= now}
    if lost:
        log.warning("trainers: %d operation(s) lost with their worker", lost)
    sent = []
    stale = utcnow() - timedelta(seconds=redispatch_after_s)
    for trainer_id in sorted(queued | ended | idle):
        try:
            if enqueue_trainer(trainer_id, stale_before=stale):
                sent.append(trainer_id)
        except Exception as exc:  # noqa: BLE001 - the broker is down: next sweep
            log.warning("trainer %s not dispatched: %s", trainer_id, exc)
            break
    return sent
