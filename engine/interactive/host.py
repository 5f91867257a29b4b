"""Where a trainer lives. A full-parameter trainer: a named, detached Ray actor
`keel-trainer-<session_id>` (namespace `keel`) holding a `TrainingSession`. A LoRA trainer: an adapter
in the shared LoRA host of its base model (`keel-lora-<key>`, `engine.interactive.lora_host`), one per
base model, holding the base weights once. Either is found by name by whichever process runs the next
operation.

Detached, because the trainer must outlive the process that started it (each operation may run in
another worker process); `release_session` is what ends it (after saving, when asked to): the actor
of a full-parameter trainer, the adapter of a LoRA trainer (the host ends with its last adapter). A
trainer that is not alive is started on the next operation, restoring the state at `restore_from`
first; if that restore fails nothing half-restored takes calls.

This module imports no torch, and Ray only inside its functions.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from engine.errors import EngineError
from engine.interactive.datums import validate_payload
from engine.interactive.spec import HOST_PREFIX, NAMESPACE, SessionSpec, actor_name, host_name, shares_base
from engine.runtime.cluster import code_options, connect, get_unwrapped

log = logging.getLogger(__name__)

HOST_CONCURRENCY = 256
"""Calls a LoRA host takes at once: they wait for their turn inside it (`lora_host.Turns`), not in Ray's queue."""
START_TIMEOUT_S = 600.0
"""A trainer no node can host this long (e.g. GPUs asked of a CPU cluster) fails the operation."""
HOST_ATTEMPTS = 3
"""Hosts an operation may find closing before it gives up (each ends within `KILL_WAIT_S`)."""
KILL_WAIT_S = 10.0
"""How long `release_session` waits for the actor's name to be free again."""


@functools.cache
def _session_actor() -> Any:
    import ray

    from engine.interactive.session import TrainingSession

    return ray.remote(TrainingSession)


@functools.cache
def _host_actor() -> Any:
    import ray

    from engine.interactive.lora_host import LoraHost

    return ray.remote(LoraHost)


def _find(session_id: str) -> Any | None:
    return _named(actor_name(session_id))


def _named(name: str) -> Any | None:
    import ray

    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def _start(spec: SessionSpec, restore_from: str | None) -> Any:
    """Start the session's actor, load the model (and the state at `restore_from`) in it."""
    return _start_actor(_session_actor(), actor_name(spec.session_id), spec, {}, (restore_from,))


def _start_host(spec: SessionSpec) -> Any:
    """Start the LoRA host of `spec`'s base model (reserving `spec`'s resources) and load the base."""
    return _start_actor(_host_actor(), host_name(spec), spec, {"max_concurrency": HOST_CONCURRENCY}, ())


def _start_actor(cls: Any, name: str, spec: SessionSpec, extra: dict[str, Any], start_args: tuple) -> Any:
    import ray

    options = {"name": name, "namespace": NAMESPACE, "lifetime": "detached", "max_restarts": 0,
               "num_cpus": spec.num_cpus, "num_gpus": spec.num_gpus, **extra, **code_options()}
    try:
        actor = cls.options(**options).remote(spec, num_threads=max(1, int(spec.num_cpus)))
    except ValueError:  # another caller started it in the meantime
        found = _named(name)
        if found is None:
            raise
        return found
    try:
        ref = actor.start.remote(*start_args)
        ready, _ = ray.wait([ref], timeout=START_TIMEOUT_S)
        if not ready:
            raise EngineError(f"no Ray node could host the trainer (num_cpus={spec.num_cpus}, "
                              f"num_gpus={spec.num_gpus}) within {START_TIMEOUT_S:.0f} s",
                              code="resources_unavailable")
        _get(ref)
    except BaseException:
        _kill(actor, name)  # a trainer (or host) that could not start takes no calls
        raise
    return actor


def _get(ref: Any) -> Any:
    """`ray.get(ref)`, with the session's own error (its code and param intact) instead of Ray's wrapping."""
    import ray

    try:
        return get_unwrapped(ref, "the trainer")
    except ray.exceptions.RayActorError as err:
        raise EngineError(f"the trainer's process died: {str(err).splitlines()[0]}", code="worker_lost") from None


def _kill(actor: Any, name: str) -> None:
    import ray

    try:
        ray.kill(actor, no_restart=True)
    except Exception as exc:  # noqa: BLE001 - already gone: nothing left to free
        log.debug("killing %s: %s", name, exc)
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline and _named(name) is not None:
        time.sleep(0.1)


def run_operation(spec: SessionSpec, op: str, payload: dict, *, restore_from: str | None = None,
                  expect_alive: bool = False) -> dict:
    """Run `op` on the trainer `spec.session_id`, starting it when it is not alive (and then loading
    the state at `restore_from` first: weights, optimizer and step; gradients pending before it was
    released are not kept). JSON in, JSON out. `expect_alive`: the caller saw the trainer alive (and
    passes no `restore_from`), so a LoRA trainer its host no longer holds was lost, not released.

    Raises:
        ConfigError / DataError (with `param`) for bad input, before anything changes;
        EngineError `worker_lost` when the trainer's process died (the next call starts a new one,
        from `restore_from`), `resources_unavailable` when no node can host it.
    """
    validate_payload(op, payload)  # what can be checked without the model, before Ray
    connect(spec.ray_address)
    if shares_base(spec):
        return _run_shared(spec, op, payload, restore_from, expect_alive)
    actor = _find(spec.session_id)
    if actor is None:
        actor = _start(spec, restore_from)
    return _get(actor.run.remote(op, payload))


def _run_shared(spec: SessionSpec, op: str, payload: dict, restore_from: str | None, expect_alive: bool) -> dict:
    """`run_operation` for a LoRA trainer, in its base model's host (started when none is alive).
    A host that closed (its last trainer left) or died before it held this trainer is replaced: no
    state of this trainer was in it."""
    name = host_name(spec)
    for _ in range(HOST_ATTEMPTS):
        host = _named(name) or _start_host(spec)
        loaded = False
        try:
            loaded = _get(host.has.remote(spec.session_id))
            if expect_alive and not loaded:
                raise EngineError("the trainer's host process was lost", code="worker_lost")
            return _get(host.run.remote(spec, op, payload, None if loaded else restore_from))
        except EngineError as err:
            if not expect_alive and not loaded and err.code in ("host_closing", "worker_lost"):
                _kill(host, name)  # closing (or gone): free its name for the next host
                continue
            if not loaded:  # it could not join (e.g. a bad restore): a host it leaves empty ends
                _leave(host, name, spec.session_id)
            raise
    raise EngineError(f"the LoRA host {name} kept closing", code="worker_lost")


def _leave(host: Any, name: str, session_id: str) -> None:
    try:
        if _get(host.has.remote(session_id)):  # it joined, and only its operation failed
            return
        if _get(host.release.remote(session_id, None))["closing"]:
            _kill(host, name)
    except EngineError as exc:  # the host is gone or failing: nothing to free
        log.debug("leaving %s: %s", name, exc)


def release_session(spec: SessionSpec, *, save_to: str | None) -> str | None:
    """Save the trainer's state to `save_to` (when given and the trainer is alive), then end its actor
    and free what it holds. Returns the path saved to, or None (nothing alive, or nothing asked).
    Idempotent. A save that fails raises and leaves the trainer alive (its state is not lost); a
    trainer whose process already died is just cleared."""
    connect(spec.ray_address)
    if shares_base(spec):
        return _release_shared(spec, save_to)
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
    _kill(actor, actor_name(spec.session_id))
    return saved


def _release_shared(spec: SessionSpec, save_to: str | None) -> str | None:
    """Page a LoRA trainer out of its host (saving it first when asked); the host's last trainer
    ends the host."""
    name = host_name(spec)
    host = _named(name)
    if host is None:
        return None
    try:
        if not _get(host.has.remote(spec.session_id)):
            return None
        outcome = _get(host.release.remote(spec.session_id, save_to))
    except EngineError as err:
        if err.code != "worker_lost":
            raise
        return None  # the host died: nothing of this trainer is left to free
    if outcome["closing"]:
        _kill(host, name)
    return outcome["saved"]


def session_alive(session: SessionSpec | str, ray_address: str | None = None) -> bool:
    """Whether the trainer is alive in the cluster: its own actor, or (a LoRA trainer) its adapter in
    its host. Given only an id, every LoRA host is asked."""
    connect(ray_address if isinstance(session, str) else session.ray_address)
    if isinstance(session, SessionSpec):
        if not shares_base(session):
            return _find(session.session_id) is not None
        hosts = [_named(host_name(session))]
    else:
        if _find(session) is not None:
            return True
        hosts = [_named(name) for name in _host_names()]
    for host in hosts:
        try:
            if host is not None and _get(host.has.remote(session if isinstance(session, str) else session.session_id)):
                return True
        except EngineError:
            continue  # a host that died holds nothing
    return False


def host_stats(spec: SessionSpec) -> dict[str, Any] | None:
    """What the LoRA host of `spec`'s base model holds (`LoraHost.stats`), or None when none is alive."""
    connect(spec.ray_address)
    host = _named(host_name(spec))
    return None if host is None else _get(host.stats.remote())


def _host_names() -> list[str]:
    import ray

    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a.get("namespace") == NAMESPACE and a["name"].startswith(HOST_PREFIX)]
