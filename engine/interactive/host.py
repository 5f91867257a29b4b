"""Where a trainer lives: a named, detached Ray actor `keel-trainer-<session_id>` (namespace `keel`)
holding a `TrainingSession`, found by name by whichever process runs the next operation.

Detached, because the trainer must outlive the process that started it (each operation may run in
another worker process); `release_session` is what ends it (after saving, when asked to). An actor
that is not alive is started on the next operation, restoring the state at `restore_from` first;
if that restore fails the new actor is killed again, so that nothing half-restored takes calls.

This module imports no torch, and Ray only inside its functions.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from engine.errors import EngineError
from engine.interactive.datums import validate_payload
from engine.interactive.spec import NAMESPACE, SessionSpec, actor_name
from engine.runtime.cluster import code_options, connect, get_unwrapped

log = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0
"""A trainer no node can host this long (e.g. GPUs asked of a CPU cluster) fails the operation."""
KILL_WAIT_S = 10.0
"""How long `release_session` waits for the actor's name to be free again."""


@functools.cache
def _session_actor() -> Any:
    import ray

    from engine.interactive.session import TrainingSession

    return ray.remote(TrainingSession)


def _find(session_id: str) -> Any | None:
    import ray

    try:
        return ray.get_actor(actor_name(session_id), namespace=NAMESPACE)
    except ValueError:
        return None


def _start(spec: SessionSpec, restore_from: str | None) -> Any:
    """Start the session's actor, load the model (and the state at `restore_from`) in it."""
    import ray

    options = {"name": actor_name(spec.session_id), "namespace": NAMESPACE, "lifetime": "detached",
               "max_restarts": 0, "num_cpus": spec.num_cpus, "num_gpus": spec.num_gpus, **code_options()}
    try:
        actor = _session_actor().options(**options).remote(spec, num_threads=max(1, int(spec.num_cpus)))
    except ValueError:  # another caller started it in the meantime
        found = _find(spec.session_id)
        if found is None:
            raise
        return found
    try:
        ref = actor.start.remote(restore_from)
        ready, _ = ray.wait([ref], timeout=START_TIMEOUT_S)
        if not ready:
            raise EngineError(f"no Ray node could host the trainer (num_cpus={spec.num_cpus}, "
                              f"num_gpus={spec.num_gpus}) within {START_TIMEOUT_S:.0f} s",
                              code="resources_unavailable")
        _get(ref)
    except BaseException:
        _kill(actor, spec.session_id)  # a trainer that could not start takes no calls
        raise
    return actor


def _get(ref: Any) -> Any:
    """`ray.get(ref)`, with the session's own error (its code and param intact) instead of Ray's wrapping."""
    import ray

    try:
        return get_unwrapped(ref, "the trainer")
    except ray.exceptions.RayActorError as err:
        raise EngineError(f"the trainer's process died: {str(err).splitlines()[0]}", code="worker_lost") from None


def _kill(actor: Any, session_id: str) -> None:
    import ray

    try:
        ray.kill(actor, no_restart=True)
    except Exception as exc:  # noqa: BLE001 - already gone: nothing left to free
        log.debug("killing trainer %s: %s", session_id, exc)
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline and _find(session_id) is not None:
        time.sleep(0.1)


def run_operation(spec: SessionSpec, op: str, payload: dict, *, restore_from: str | None = None) -> dict:
    """Run `op` on the trainer `spec.session_id`, starting its actor when none is alive (and then
    loading the state at `restore_from` first: weights, optimizer and step; gradients pending before
    it was released are not kept). JSON in, JSON out.

    Raises:
        ConfigError / DataError (with `param`) for bad input, before anything changes;
        EngineError `worker_lost` when the trainer's process died (the next call starts a new one,
        from `restore_from`), `resources_unavailable` when no node can host it.
    """
    validate_payload(op, payload)  # what can be checked without the model, before Ray
    connect(spec.ray_address)
    actor = _find(spec.session_id)
    if actor is None:
        actor = _start(spec, restore_from)
    return _get(actor.run.remote(op, payload))


def release_session(spec: SessionSpec, *, save_to: str | None) -> str | None:
    """Save the trainer's state to `save_to` (when given and the trainer is alive), then end its actor
    and free what it holds. Returns the path saved to, or None (nothing alive, or nothing asked).
    Idempotent. A save that fails raises and leaves the trainer alive (its state is not lost); a
    trainer whose process already died is just cleared."""
    connect(spec.ray_address)
    actor = _find(spec.session_id)
    if actor is None:
        return None
    saved = None
    if save_to:
        try:
            _get(actor.save_to.remote(save_to))
            saved = save_to
        except EngineError as err:
            if err.code != "worker_lost":
                raise
    _kill(actor, spec.session_id)
    return saved


def session_alive(session_id: str, ray_address: str | None = None) -> bool:
    """Whether the trainer's actor is alive in the cluster."""
    connect(ray_address)
    return _find(session_id) is not None
