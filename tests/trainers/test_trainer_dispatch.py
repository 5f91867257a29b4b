"""Sending drain tasks (`workers.dispatch.enqueue_trainer`) and the sweeper's part for trainers
(`workers.trainer_sweeper`), against the database with the broker replaced by a recorder: one task
per burst of calls, none while a worker holds the lease, lost operations failed, idle trainers sent."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from core.models import Trainer, TrainerOperation, utcnow


@pytest.fixture
def sent(monkeypatch):
    from workers.celery_app import celery_app

    calls: list[str] = []
    monkeypatch.setattr(celery_app, "send_task", lambda name, args, **_: calls.append(args[0]))
    return calls


@pytest.fixture
def trainer_id(db, project_key) -> str:
    trainer = Trainer(project_id=project_key[0], model="org/name", base_model_path="org/name", resources={})
    db.add(trainer)
    db.commit()
    return trainer.id


def _set(db, trainer_id: str, **values) -> None:
    db.execute(update(Trainer).where(Trainer.id == trainer_id).values(**values))
    db.commit()


def test_one_task_per_burst_and_none_while_leased(db, trainer_id, sent):
    from workers import dispatch, trainers

    assert dispatch.enqueue_trainer(trainer_id) and dispatch.enqueue_trainer(trainer_id)
    assert sent == [trainer_id]  # the second call finds the first task not started yet
    assert trainers.take_lease(trainer_id, "w1") and not trainers.take_lease(trainer_id, "w2")
    assert trainers.let_go(trainer_id, "w1") is False  # nothing queued: no new task needed
    assert dispatch.enqueue_trainer(trainer_id) and sent == [trainer_id, trainer_id]  # cleared with the lease
    assert trainers.take_lease(trainer_id, "w1")
    _set(db, trainer_id, dispatched_at=None)
    assert dispatch.enqueue_trainer(trainer_id) and len(sent) == 2  # a worker holds it: it sees the new call
    db.add(TrainerOperation(trainer_id=trainer_id, project_id=db.get(Trainer, trainer_id).project_id, seq=1,
                            kind="optim_step", request={}))
    db.commit()
    assert trainers.let_go(trainer_id, "w1") is True  # work arrived meanwhile: the caller sends again


def test_the_sweeper_fails_lost_operations_and_sends_idle_trainers(db, trainer_id, sent, project_key):
    from workers.trainer_sweeper import sweep_trainers

    db.add(TrainerOperation(trainer_id=trainer_id, project_id=project_key[0], seq=1, kind="forward",
                            status="running", request={}))
    db.commit()
    _set(db, trainer_id, lease_owner="gone", lease_until=utcnow() - timedelta(seconds=5), idle_timeout_s=3600)
    sweep_trainers()
    db.expire_all()
    op = db.query(TrainerOperation).filter_by(trainer_id=trainer_id).one()
    assert op.status == "failed" and op.error["code"] == "worker_lost"
    assert trainer_id not in sent  # nothing queued, not idle yet
    _set(db, trainer_id, last_used_at=utcnow() - timedelta(seconds=3601))
    assert trainer_id in sweep_trainers() and sent.count(trainer_id) == 1
    _set(db, trainer_id, lease_owner="w", lease_until=utcnow() + timedelta(seconds=60), dispatched_at=None)
    assert trainer_id not in sweep_trainers()  # held by a worker: it releases the trainer itself
