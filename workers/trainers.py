"""The Celery task behind interactive trainers: `keel.run_trainer(trainer_id)`.

It takes the trainer's lease (a conditional UPDATE on the database's clock, renewed while it works, so
one worker at a time drives a trainer), then:

- runs the queued operations one at a time in `seq` order through `engine.interactive.run_operation`,
  persisting each result or error (bad input: the operation fails with the engine's code and `param`,
  the trainer is unchanged), the trainer's step, tokens and last use, and an event per call;
- a deleted (or failed) trainer: releases its actor without a save;
- an active trainer idle past `idle_timeout_s` with nothing queued: releases its actor after saving
  its state to `trainers/<id>/auto/<n>` (status `idle`); the next call restores from there;
- a LoRA trainer lives in its base model's shared host (`engine.interactive.lora_host`): after each
  operation it lets go when another trainer of that host has operations waiting for a worker, and
  goes back behind it in the broker's queue (round robin; `core.trainers.queue_state` is what a
  client is told meanwhile). Its idle release pages its adapter and optimizer state out of the host.

An actor that is not alive when an operation comes (idle release, a node or worker lost) is started
again from the trainer's last full save (`state_path`: a `save_state`, `load_state` or idle-release
save), or from the base model when there is none: whatever happened after that save (steps, and
gradients accumulated without an `optim_step`) is lost, and a `trainer.warning` says so when the
actor was lost rather than released.

Letting go of the lease clears `dispatched_at` with it, then looks for work committed meanwhile and
sends the task again for it (`workers.dispatch.enqueue_trainer` explains why nothing is stranded).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select, update

from core import logging as logcontext
from core import trainers
from core.clock import db_now
from core.config import settings
from core.db import session_factory
from core.models import Model, Trainer, TrainerOperation
from core.storage import get_storage
from engine.errors import EngineError
from engine.interactive import SessionSpec, release_session, run_operation, session_alive, validate_payload
from engine.runtime.cluster import connect
from workers import dispatch
from workers.capacity import start_publisher
from workers.celery_app import celery_app
from workers.failures import is_worded_for_users, public_error
from workers.reporter import json_safe, retry_db
from workers.resolve import MissingReference, allowed_model_roots

log = logging.getLogger(__name__)


def lease_s() -> float:
    """How long a lease lasts without renewal: a worker that died lets go of its trainers this fast."""
    return max(10.0, settings.WORKER_HEARTBEAT_TIMEOUT_S)


@celery_app.task(name=dispatch.RUN_TRAINER_TASK, ignore_result=True)
def run_trainer(trainer_id: str) -> str:
    """Drain the trainer's queued operations, or release its actor; returns what happened (for the log)."""
    with logcontext.context(trainer_id=trainer_id):
        try:
            connect(settings.RAY_ADDRESS or None, num_cpus=settings.RAY_NUM_CPUS)
        except Exception as exc:  # noqa: BLE001 - the operations wait; the sweeper sends the task again
            log.warning("trainer %s left queued: cannot reach the Ray cluster: %s", trainer_id, exc)
            _clear_dispatch(trainer_id)
            return "deferred: the Ray cluster is unreachable"
        start_publisher()
        token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        if not take_lease(trainer_id, token):
            return "held by another worker"
        renewer = LeaseRenewer(trainer_id, token)
        renewer.start()
        try:
            outcome = drain(trainer_id)
        finally:
            renewer.stop()
            pending = let_go(trainer_id, token)
        if pending:
            dispatch.enqueue_trainer(trainer_id)
        return outcome


# -- the lease -------------------------------------------------------------------------------------

def take_lease(trainer_id: str, token: str) -> bool:
    def txn() -> bool:
        with session_factory()() as db:
            now = db_now(db)
            n = db.execute(update(Trainer).where(
                Trainer.id == trainer_id, or_(Trainer.lease_until.is_(None), Trainer.lease_until < now))
                .values(lease_owner=token, lease_until=now + timedelta(seconds=lease_s()))
                .execution_options(synchronize_session=False)).rowcount
            db.commit()
            return n == 1

    return retry_db(txn, what=f"lease trainer {trainer_id}")


def let_go(trainer_id: str, token: str) -> bool:
    """Give the lease back (and `dispatched_at` with it); True when operations arrived that need a new
    task (an unreleased deleted trainer, or a release that failed, is left to the sweeper)."""
    def txn() -> bool:
        with session_factory()() as db:
            db.execute(update(Trainer).where(Trainer.id == trainer_id, Trainer.lease_owner == token)
                       .values(lease_owner=None, lease_until=None, dispatched_at=None)
                       .execution_options(synchronize_session=False))
            db.commit()
            status = db.scalar(select(Trainer.status).where(Trainer.id == trainer_id))
            queued = db.scalar(select(TrainerOperation.id).where(TrainerOperation.trainer_id == trainer_id,
                                                                 TrainerOperation.status == "queued").limit(1))
            return status not in (None, *trainers.ENDED) and queued is not None

    return retry_db(txn, what=f"release trainer {trainer_id}")


def _clear_dispatch(trainer_id: str) -> None:
    with session_factory()() as db:
        db.execute(update(Trainer).where(Trainer.id == trainer_id).values(dispatched_at=None)
                   .execution_options(synchronize_session=False))
        db.commit()


class LeaseRenewer(threading.Thread):
    """Renews the lease every third of its length while an operation runs."""

    def __init__(self, trainer_id: str, token: str) -> None:
        super().__init__(daemon=True, name=f"keel-lease-{trainer_id}")
        self.trainer_id, self.token = trainer_id, token
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(lease_s() / 3):
            try:
                with session_factory()() as db:
                    now = db_now(db)
                    n = db.execute(update(Trainer).where(Trainer.id == self.trainer_id,
                                                         Trainer.lease_owner == self.token)
                                   .values(lease_until=now + timedelta(seconds=lease_s()))
                                   .execution_options(synchronize_session=False)).rowcount
                    db.commit()
                if n == 0:
                    log.warning("trainer %s: lost its lease", self.trainer_id)
            except Exception as exc:  # noqa: BLE001 - try again at the next beat
                log.warning("trainer %s: lease renewal failed: %s", self.trainer_id, exc)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


# -- the work --------------------------------------------------------------------------------------

def drain(trainer_id: str) -> str:
    done = 0
    while True:
        with session_factory()() as db:
            trainer = db.get(Trainer, trainer_id)
            if trainer is None:
                return "no such trainer"
            db.expunge(trainer)
            op_id = db.scalar(select(TrainerOperation.id).where(TrainerOperation.trainer_id == trainer_id,
                                                                TrainerOperation.status == "queued")
                              .order_by(TrainerOperation.seq).limit(1))
        if trainer.status in trainers.ENDED:
            return end(trainer)
        if op_id is None:
            return release_if_idle(trainer) or f"ran {done} operation(s)"
        run_one(trainer, op_id)
        done += 1
        if trainer.lora and _host_mates_waiting(trainer):
            # Round robin between the LoRA trainers of one host: a long queue goes back behind the
            # others' tasks after each operation (let_go sends this task again).
            return f"ran {done} operation(s), yielded to trainers sharing the host"


def _host_mates_waiting(trainer: Trainer) -> bool:
    with session_factory()() as db:
        return trainers.host_mates_waiting(db, trainer)


def session_spec(trainer: Trainer) -> SessionSpec:
    lora = trainer.lora or {}
    targets = lora.get("target_modules", "all-linear")
    resources = trainer.resources or {}
    storage = get_storage()
    own = str(Path(storage.local_path("trainers")).resolve()) if storage.is_local else storage.location("trainers")
    return SessionSpec(
        session_id=trainer.id, model_path=trainer.base_model_path, lora_rank=int(lora.get("rank", 0)),
        lora_alpha=int(lora.get("alpha", 16)), target_modules=targets if isinstance(targets, str) else tuple(targets),
        seed=trainer.seed, dtype=trainer.dtype, num_cpus=float(resources.get("num_cpus", 1.0)),
        num_gpus=float(resources.get("num_gpus", 0.0)), state_root=trainers.state_root(trainer.id),
        storage_options=dict(settings.STORAGE_OPTIONS), allowed_roots=(*allowed_model_roots(), own),
        ray_address=settings.RAY_ADDRESS or None, artifact_cache_dir=settings.ARTIFACT_CACHE_DIR or None)


def _model_path(db, trainer: Trainer, model_id: str, param: str) -> str:
    model = db.get(Model, model_id)
    if model is None or model.project_id != trainer.project_id:
        raise MissingReference(f"{param}: model {model_id} no longer exists", param=param)
    return model.path


def engine_payload(trainer: Trainer, op: TrainerOperation) -> dict[str, Any]:
    """The stored request with saved-model ids turned into their locations."""
    payload = dict(op.request or {})
    with session_factory()() as db:
        if op.kind == "load_state":
            payload["path"] = _model_path(db, trainer, payload["path"], "path")
        if op.kind == "sample" and payload.get("sampler_path"):
            payload["sampler_path"] = _model_path(db, trainer, payload["sampler_path"], "sampler_path")
    return payload


def _param(param: str | None) -> str | None:
    """The engine's `data[3].model_input` as the API writes params: `data.3.model_input`."""
    return re.sub(r"\[(\d+)\]", r".\1", param) if param else None


def _user_error(err: EngineError) -> dict[str, Any]:
    return {"code": err.code, "message": err.message, "param": _param(err.param)}


def run_one(trainer: Trainer, op_id: str) -> None:
    """Run one queued operation and record how it ended."""
    def claim() -> TrainerOperation | None:
        with session_factory()() as db:
            n = db.execute(update(TrainerOperation).where(TrainerOperation.id == op_id,
                                                          TrainerOperation.status == "queued")
                           .values(status="running", started_at=db_now(db))
                           .execution_options(synchronize_session=False)).rowcount
            db.commit()
            return db.get(TrainerOperation, op_id) if n else None

    op = retry_db(claim, what=f"claim operation {op_id}")
    if op is None:
        return
    spec = session_spec(trainer)
    try:
        payload = engine_payload(trainer, op)
        validate_payload(op.kind, payload)  # bad input fails the operation before any actor starts
    except EngineError as err:
        return finish(trainer, op, error=_user_error(err) if is_worded_for_users(err) else public_error(op.id, err))
    alive = session_alive(spec)
    restore_from = None if alive else trainer.state_path
    try:
        result = run_operation(spec, op.kind, payload, restore_from=restore_from, expect_alive=alive)
    except Exception as err:  # noqa: BLE001 - every failure is recorded on the operation
        up = session_alive(spec)
        error = _user_error(err) if is_worded_for_users(err) else public_error(op.id, err)
        if not alive and not up and is_worded_for_users(err):  # the model (or its last save) cannot be loaded
            return finish(trainer, op, error=error, trainer_failed=error)
        return finish(trainer, op, error=error, lost=alive and not up,
                      restored=(restore_from or "") if up and not alive else None)
    finish(trainer, op, result=result, restored=None if alive else (restore_from or ""))


def _base_name(db, trainer: Trainer) -> str:
    if trainer.model.startswith("model-"):
        model = db.get(Model, trainer.model)
        if model is not None:
            return model.name
    return Path(trainer.model.rstrip("/")).name or trainer.model


def finish(trainer: Trainer, op: TrainerOperation, *, result: dict[str, Any] | None = None,
           error: dict[str, Any] | None = None, restored: str | None = None, lost: bool = False,
           trainer_failed: dict[str, Any] | None = None) -> None:
    """Persist the operation's outcome, the trainer's counters and the events, in one transaction.
    `restored`: the actor was started for this operation ("" from the base model, else the save it
    loaded)."""
    def txn() -> None:
        with session_factory()() as db:
            now = db_now(db)
            t = db.get(Trainer, trainer.id, with_for_update=True)
            values: dict[str, Any] = {}
            data: dict[str, Any] = {"operation_id": op.id, "seq": op.seq, "kind": op.kind}
            if restored is not None:  # an actor was started for this call: the trainer holds resources again
                _note_restore(db, t, restored, values)
                values["released_at"] = None
                if t.status not in trainers.ENDED:
                    values["status"] = "active"
            if error is not None:
                update_op = {"status": "failed", "error": error, "finished_at": now}
                values["last_used_at"] = now
                data.update(status="failed", tokens=0, error=error)
                if trainer_failed is not None and t.status not in trainers.ENDED:
                    values.update(status="failed", error=trainer_failed)
                elif lost and t.status not in trainers.ENDED:
                    values.update(status="released", released_at=now)
                    trainers.append_event(db, t.id, "trainer.warning", {
                        "code": "actor_lost", "message": "The trainer's actor was lost during this operation; the "
                        "next call restores the last save (steps and gradients since it are lost)."})
            else:
                public, tokens = _public_result(db, t, op, dict(result or {}), values)
                update_op = {"status": "succeeded", "result": json_safe(public), "tokens": tokens, "finished_at": now}
                values.update(tokens=Trainer.tokens + tokens, last_used_at=now, released_at=None)
                if t.status not in trainers.ENDED:
                    values.update(status="active")
                data.update(status="succeeded", tokens=tokens, step=values.get("step", t.step))
                if isinstance(public.get("metrics"), dict):
                    data["metrics"] = json_safe(public["metrics"])
            db.execute(update(TrainerOperation).where(TrainerOperation.id == op.id).values(**update_op)
                       .execution_options(synchronize_session=False))
            if values:
                db.execute(update(Trainer).where(Trainer.id == t.id).values(**values)
                           .execution_options(synchronize_session=False))
            trainers.append_event(db, t.id, "trainer.operation", data)
            if "status" in values and values["status"] != t.status:
                reason = "restored" if values["status"] == "active" else "operation_failed"
                trainers.append_event(db, t.id, "trainer.status", {"status": values["status"], "reason": reason})
            db.commit()

    retry_db(txn, what=f"record operation {op.id}")


def _note_restore(db, t: Trainer, restored: str, values: dict[str, Any]) -> None:
    """The actor was started for this operation: the step is the restored save's; an actor that was
    lost (not released) gets a warning."""
    values["step"] = (t.state_step or 0) if restored else 0
    ran_before = db.scalar(select(TrainerOperation.id).where(
        TrainerOperation.trainer_id == t.id, TrainerOperation.status == "succeeded").limit(1)) is not None
    if t.status == "active" and ran_before:
        where = f"its last save (step {t.state_step})" if restored else "the base model (it was never saved)"
        trainers.append_event(db, t.id, "trainer.warning", {
            "code": "actor_lost", "message": f"The trainer's actor was lost; it was restored from {where}: steps and "
            "gradients after that are lost."})


def _public_result(db, t: Trainer, op: TrainerOperation, result: dict[str, Any],
                   values: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """What the tenant sees (saved locations become model ids) and the tokens processed; the trainer's
    new values go into `values`."""
    tokens = int(result.pop("tokens", 0) or 0)
    if op.kind in ("optim_step", "load_state") and isinstance(result.get("step"), int):
        values["step"] = result["step"]
    if op.kind == "load_state":
        values.update(state_path=engine_payload(t, op)["path"], state_step=result.get("step"))
    if op.kind in ("save_state", "save_weights_for_sampler"):
        name = (op.request or {}).get("name", "")
        fmt = result.get("format") or ("lora" if t.lora else "hf")
        model = Model(project_id=t.project_id, trainer_id=t.id, name=f"{_base_name(db, t)}:{name}"[-200:],
                      kind="policy", format=fmt, base_model=t.model, path=result["path"])
        db.add(model)
        db.flush()
        step = result.get("step", values.get("step", t.step))
        trainers.append_event(db, t.id, "trainer.model", {
            "model_id": model.id, "kind": "state" if op.kind == "save_state" else "sampler", "name": name,
            "step": step})
        result = {**result, "path": model.id, "model_id": model.id}
        if op.kind == "save_state":
            values.update(state_path=model.path, state_step=step)
    return result, tokens


# -- releasing -------------------------------------------------------------------------------------

def end(trainer: Trainer) -> str:
    """A deleted or failed trainer: release its actor (no save), fail what is still queued."""
    if trainer.released_at is None:
        try:
            release_session(session_spec(trainer), save_to=None)
        except Exception as exc:  # noqa: BLE001 - the sweeper tries again
            log.warning("trainer %s: release failed: %s", trainer.id, exc)
            return "release failed"

    def txn() -> None:
        with session_factory()() as db:
            now = db_now(db)
            db.execute(update(TrainerOperation).where(TrainerOperation.trainer_id == trainer.id,
                                                      TrainerOperation.status == "queued")
                       .values(status="failed", finished_at=now, error={
                           "code": f"trainer_{trainer.status}", "param": "trainer_id",
                           "message": f"The trainer is {trainer.status}; it takes no more operations."})
                       .execution_options(synchronize_session=False))
            db.execute(update(Trainer).where(Trainer.id == trainer.id).values(released_at=now)
                       .execution_options(synchronize_session=False))
            db.commit()

    retry_db(txn, what=f"end trainer {trainer.id}")
    return f"released ({trainer.status})"


def release_if_idle(trainer: Trainer) -> str | None:
    """Release an active trainer idle past its timeout, saving its state first; None when not due."""
    with session_factory()() as db:
        now = db_now(db)
    if trainer.status != "active" or trainer.last_used_at + timedelta(seconds=trainer.idle_timeout_s) > now:
        return None
    n = trainer.auto_saves + 1
    saved = release_session(session_spec(trainer), save_to=trainers.auto_save_location(trainer.id, n))

    def txn() -> bool:
        with session_factory()() as db:
            ran = db.scalar(select(TrainerOperation.id).where(TrainerOperation.trainer_id == trainer.id,
                                                              TrainerOperation.status == "succeeded").limit(1))
            values: dict[str, Any] = {"released_at": db_now(db)}
            if saved:
                values.update(status="idle", state_path=saved, state_step=trainer.step, auto_saves=n)
            else:  # no actor was alive: nothing to save (never started, or lost)
                values["status"] = "released" if ran else "idle"
            changed = db.execute(update(Trainer).where(Trainer.id == trainer.id, Trainer.status == "active",
                                                       Trainer.last_used_at == trainer.last_used_at)
                                 .values(**values).execution_options(synchronize_session=False)).rowcount
            if changed:
                trainers.append_event(db, trainer.id, "trainer.status", {
                    "status": values["status"], "reason": "idle_timeout", "saved_step": trainer.step if saved else None})
            db.commit()
            return bool(changed)

    retry_db(txn, what=f"release trainer {trainer.id}")
    return f"released after {trainer.idle_timeout_s} s idle" + (" (saved)" if saved else "")
