"""LoRA trainers of one base model through the live service: they share one host; a trainer with a
long queue lets another's operation go after one of its own; a waiting client is told
`paused_capacity`; a lost host is restored from each trainer's last save."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from keel_client.training import types
from sqlalchemy import select, update

from core import trainers as core_trainers
from core.models import Trainer, TrainerOperation, utcnow

IDS = list(range(3, 12))
DATA = [types.Datum(model_input=IDS[:-1], loss_fn_inputs={"target_tokens": IDS[1:], "weights": [1.0] * 8})]


def _hold(db, *trainer_ids: str, held: bool) -> None:
    """Pretend a worker holds the trainers (no task is sent for their calls), or let them go."""
    until = utcnow() + timedelta(minutes=5) if held else None
    db.execute(update(Trainer).where(Trainer.id.in_(trainer_ids))
               .values(lease_owner="test" if held else None, lease_until=until, dispatched_at=None))
    db.commit()


def test_a_long_queue_does_not_starve_another_trainer_of_the_host(service, demo_assets, celery_worker, db):
    from workers import dispatch

    a = service.create_lora_training_client(demo_assets["model"], rank=4, seed=1)
    b = service.create_lora_training_client(demo_assets["model"], rank=4, seed=2)
    full = service.create_training_client(demo_assets["model"], seed=3)
    for t in (a, b):
        t.forward(DATA).result()  # both in the host before the race
    _hold(db, a.trainer_id, b.trainer_id, held=True)
    queued_a = [a.forward_backward(DATA) for _ in range(10)]
    queued_b = b.forward_backward(DATA)

    # While one of a's operations runs, b's wait for the host: paused_capacity (a full trainer never waits).
    first = db.get(TrainerOperation, queued_a[0].id)
    trainer_b, trainer_full = db.get(Trainer, b.trainer_id), db.get(Trainer, full.trainer_id)
    assert core_trainers.queue_state(db, trainer_b) == "active"
    db.execute(update(TrainerOperation).where(TrainerOperation.id == first.id).values(status="running"))
    db.commit()
    assert core_trainers.queue_state(db, trainer_b) == "paused_capacity"
    assert core_trainers.queue_state(db, trainer_full) == "active"
    db.execute(update(TrainerOperation).where(TrainerOperation.id == first.id).values(status="queued"))
    db.commit()

    _hold(db, a.trainer_id, b.trainer_id, held=False)
    assert dispatch.enqueue_trainer(a.trainer_id) and dispatch.enqueue_trainer(b.trainer_id)
    queued_b.result(timeout=120)
    for f in queued_a:
        f.result(timeout=120)
    db.expire_all()
    order = list(db.scalars(select(TrainerOperation.trainer_id).where(
        TrainerOperation.id.in_([f.id for f in (*queued_a, queued_b)])).order_by(TrainerOperation.started_at)))
    assert b.trainer_id in order[:2], order  # b's one operation ran within the first two
    assert order.count(a.trainer_id) == 10


def test_a_lost_host_restores_each_trainer_from_its_last_save(service, demo_assets, celery_worker, ray_cluster, db):
    from engine.interactive.spec import host_name
    from workers.trainers import session_spec

    trainer = service.create_lora_training_client(demo_assets["model"], rank=4, seed=4)
    adam = types.AdamParams(learning_rate=1e-2)
    trainer.forward_backward(DATA)
    trainer.optim_step(adam)
    saved_loss = trainer.forward(DATA).result().metrics["loss:sum"]
    assert trainer.save_state("one").result().step == 1
    trainer.forward_backward(DATA)
    assert trainer.optim_step(adam).result().step == 2  # not saved: lost with the host
    name = host_name(session_spec(db.get(Trainer, trainer.trainer_id)))
    kill = ("import sys, ray; ray.init(address=sys.argv[1], namespace='keel', log_to_driver=False); "
            "ray.kill(ray.get_actor(sys.argv[2], namespace='keel'), no_restart=True)")
    subprocess.run([sys.executable, "-c", kill, ray_cluster, name], check=True, timeout=120)
    assert trainer.forward(DATA).result().metrics["loss:sum"] == pytest.approx(saved_loss, abs=1e-6)
    info = trainer.get_info()
    assert (info["status"], info["step"], info["last_saved_step"]) == ("active", 1, 1)
    warnings = [e["data"]["code"] for e in trainer.events(limit=1000) if e["type"] == "trainer.warning"]
    assert warnings == ["actor_lost"]
    trainer.forward_backward(DATA)
    assert trainer.optim_step(adam).result().step == 2
