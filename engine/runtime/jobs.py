"""Run one job: the method's entry point inside a named Ray actor, so that a cancel can kill it.

`run_job` starts a controller actor `keel-job-<job_id>` (namespace `keel`) and calls the method
there. The controller reserves no CPUs of its own: the method reserves what its worker actors need,
except where the method trains in the controller itself (`IN_CONTROLLER`), which then holds that one
worker's CPUs and GPUs (so Ray counts them, and gives it its GPU). The caller's process only
waits, polling `reporter.should_stop()` every second; when it turns true the controller is killed,
and with it every actor and placement group it created, then `Cancelled` is raised.

The controller is a *detached* actor. Placement groups created by a non-detached actor belong to
the driver process and outlive a killed controller (its CPUs would stay reserved until the worker
process exits); a detached controller's placement groups die with it. A detached actor also
outlives a dead caller, so the controller guards itself: when the reporter has said "stop" for
`ORPHAN_GRACE_S` and nobody killed it (the caller is gone), it exits on its own. A re-run of the
same job kills a leftover controller by name before starting a new one.

A pause is not a stop: the caller keeps waiting while the method finishes its step, checkpoints it
and raises `Paused` (`reporter.should_pause()`). Only a controller that has not returned
`pause_grace_s` after the request (a hung loop) is killed; `Paused` is raised then too, and the job
resumes from its newest checkpoint.

Inside the controller the method runs under `engine.runtime.watchdog.run_watched`: a step past its timeout,
or the run past `trainer.max_duration_s`, fails the job even when the loop is hung (the controller
returns the error; killing it then frees what the hung loop holds).

This module imports no torch: the entry points are imported by name inside the actor.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from engine.config import JobRequest, JobResult
from engine.errors import Cancelled, ConfigError, EngineError, Paused
from engine.runtime.cluster import code_options, connect, get_unwrapped
from engine.runtime.manifest import record as record_manifest
from engine.runtime.reporting import Reporter
from engine.runtime.watchdog import limits, run_watched

log = logging.getLogger(__name__)

NAMESPACE = "keel"
ENTRY_POINTS: dict[str, tuple[str, str]] = {
    "sft": ("engine.methods.sft", "run_sft"),
    "reward_model": ("engine.methods.reward_model", "run_reward_model"),
    "rm_distill": ("engine.methods.rm_distill", "run_rm_distill"),
    "dpo": ("engine.methods.dpo", "run_dpo"),
    "ppo": ("engine.methods.ppo_trajectories", "run_ppo_by_source"),  # generated, or recorded trajectories
    "distill_policy": ("engine.methods.distill_policy", "run_distill_policy"),
    "eval": ("engine.methods.evaluate", "run_eval"),
}
"""Method name -> (module, function); imported only when a job of that method runs."""
IN_CONTROLLER = frozenset({"sft", "reward_model", "rm_distill", "dpo"})
"""Methods that train in the calling process when `resources.num_workers == 1` (the default of
`engine.runtime.distributed.make_group`); PPO always starts role actors."""
POLL_S = 1.0
"""How often the caller checks for completion and for a stop request."""
START_TIMEOUT_S = 600.0
"""A controller no node can host this long (e.g. GPUs asked of a CPU cluster) fails the job."""
CONTROLLER_STARTS = 3
"""Starts of a controller that dies before it is ready (its node was lost) within one attempt."""
CONTROLLER_RESTART_DELAY_S = 5.0
"""Pause before starting it again: time for Ray to mark a lost node dead."""
ORPHAN_GRACE_S = 15.0
"""A controller told to stop that is still alive this long later has lost its caller: it exits."""
PAUSE_SAVE_S = 120.0
"""Beyond one step's timeout, how long a paused loop gets to write its checkpoint (`pause_grace_s`)."""


def actor_name(job_id: str) -> str:
    return f"keel-job-{job_id}"


def entry_point(method: str) -> Callable[[JobRequest, Reporter], JobResult]:
    """The method's `fn(request, reporter) -> JobResult`."""
    if method not in ENTRY_POINTS:
        raise ConfigError(f"unknown method {method!r}", param="method")
    module, name = ENTRY_POINTS[method]
    return getattr(importlib.import_module(module), name)


class JobController:
    """Runs one method in this process. The Ray actor is a thin shell around this plain class."""

    def run(self, request: JobRequest, reporter: Reporter) -> JobResult:
        threading.Thread(target=self._exit_when_orphaned, args=(reporter,), daemon=True,
                         name="keel-orphan-guard").start()
        if controller_resources(request)["num_cpus"] == 0:
            # A driver that reserves no CPUs (its workers do): its own tensor work (advantages,
            # metrics) takes one thread. A worker trained here sets its own count from its CPUs.
            import torch

            torch.set_num_threads(1)
        record_manifest(request, reporter)  # on the node that runs it
        return run_watched(entry_point(request.method), request, reporter)

    @staticmethod
    def _exit_when_orphaned(reporter: Reporter) -> None:
        stop_seen: float | None = None
        while True:
            time.sleep(POLL_S)
            try:
                stopping = reporter.should_stop()
            except Exception as exc:  # noqa: BLE001 - the reporter's store is down: ask again later
                log.warning("stop check failed: %s", exc)
                continue
            if not stopping:
                stop_seen = None
            elif stop_seen is None:
                stop_seen = time.monotonic()
            elif time.monotonic() - stop_seen > ORPHAN_GRACE_S:
                log.warning("job controller told to stop %.0f s ago and not killed: exiting", ORPHAN_GRACE_S)
                os._exit(1)


@functools.cache
def _controller_actor() -> Any:
    import ray

    return ray.remote(JobController)


def controller_resources(request: JobRequest) -> dict[str, float]:
    """What the controller actor reserves: the single worker's share when it trains in-process."""
    res = request.resources
    if request.method in IN_CONTROLLER and res.num_workers == 1:
        return {"num_cpus": res.cpus_per_worker, "num_gpus": res.gpus_per_worker}
    return {"num_cpus": 0, "num_gpus": 0}


def _actor_options(request: JobRequest) -> dict[str, Any]:
    return {"name": actor_name(request.job_id), "namespace": NAMESPACE, "lifetime": "detached",
            "max_restarts": 0, **code_options(), **controller_resources(request)}


def controller_alive(job_id: str) -> bool:
    """Whether a controller of the job is alive in the cluster (this process must be connected)."""
    import ray

    try:
        ray.get_actor(actor_name(job_id), namespace=NAMESPACE)
    except ValueError:
        return False
    return True


def kill_controller(job_id: str, wait_s: float = 10.0) -> bool:
    """Kill the job's controller if one is alive (and with it its workers), waiting up to `wait_s`
    for its name to be free again; True if there was one."""
    import ray

    try:
        actor = ray.get_actor(actor_name(job_id), namespace=NAMESPACE)
    except ValueError:
        return False
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            ray.get_actor(actor_name(job_id), namespace=NAMESPACE)
        except ValueError:
            break
        time.sleep(0.1)
    return True


def pause_grace_s(request: JobRequest) -> float:
    """How long after a pause request the controller may take to return: the step under way
    (`guardrails.step_timeout_s`) and its checkpoint."""
    return limits(request.config)[0] + PAUSE_SAVE_S


def run_job(request: JobRequest, reporter: Reporter) -> JobResult:
    """Run `request` with the entry point of `request.method` in the actor `keel-job-<job_id>`.

    Raises the method's `EngineError` with its code intact; `Cancelled` when `reporter.should_stop()`
    turned true (the actor is killed within about `POLL_S` of it); `Paused` when the method paused
    (or did not within `pause_grace_s` of `reporter.should_pause()`); `EngineError(code="worker_lost")`
    when the controller process died. With `resources.executor: local` the method runs in this
    process instead (`run_local`).
    """
    if request.resources.executor == "local":
        return run_local(request, reporter)
    connect(request.ray_address)
    deadline = time.monotonic() + START_TIMEOUT_S
    for start in range(1, CONTROLLER_STARTS + 1):
        try:
            return _run_controller(request, reporter, deadline)
        except _NotStarted as err:
            # Its node died under it before Ray noticed (a node lost moments ago is still offered):
            # start it again, elsewhere, rather than spend one of the job's attempts.
            if start == CONTROLLER_STARTS or time.monotonic() > deadline:
                raise EngineError(f"the job controller died before it started, {start} times: {err}",
                                  code="worker_lost") from None
            log.warning("the controller of %s died before it started (%s); starting it again", request.job_id, err)
            time.sleep(CONTROLLER_RESTART_DELAY_S)
    raise AssertionError("unreachable")


class _NotStarted(Exception):
    """The controller actor died before its constructor finished."""


def _run_controller(request: JobRequest, reporter: Reporter, deadline: float) -> JobResult:
    import ray

    if kill_controller(request.job_id):
        log.warning("killed a leftover controller of job %s", request.job_id)
    actor = _controller_actor().options(**_actor_options(request)).remote()
    pause_deadline: float | None = None
    try:
        started = actor.__ray_ready__.remote()
        ref = actor.run.remote(request, reporter)
        while True:
            ready, _ = ray.wait([ref], timeout=POLL_S)
            if ready:
                if started is not None:
                    _check_started(started)
                return _result(ref, reporter)
            if reporter.should_stop():
                raise Cancelled("job cancelled")
            if pause_deadline is None and reporter.should_pause():
                pause_deadline = time.monotonic() + pause_grace_s(request)
            elif pause_deadline is not None and time.monotonic() > pause_deadline:
                raise Paused(f"the job did not pause within {pause_grace_s(request):.0f} s; its controller was "
                             "stopped and it resumes from its newest checkpoint", data={"step": None})
            if started is not None and ray.wait([started], timeout=0)[0]:
                _check_started(started)  # ready, or dead before it was
                started = None
            elif started is not None and time.monotonic() > deadline:
                raise EngineError(f"no Ray node could host the job's controller "
                                  f"({controller_resources(request)}) within {START_TIMEOUT_S:.0f} s",
                                  code="resources_unavailable")
    finally:
        try:
            ray.kill(actor, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - already gone, or Ray itself is: nothing left to free
            log.debug("killing the controller of %s: %s", request.job_id, exc)


def run_local(request: JobRequest, reporter: Reporter) -> JobResult:
    """The in-process executor: the method runs in the caller's process on its one device, and Ray
    is never imported (PPO's roles become plain objects, `engine.roles.local`). A cancel is noticed
    between steps, where every method checks `reporter.should_stop()`; nothing kills a step midway."""
    if request.resources.num_workers != 1:
        raise ConfigError("resources.executor 'local' runs one worker: set resources.num_workers to 1",
                          param="resources.num_workers")
    record_manifest(request, reporter)
    # Under the watchdog too; a hung loop's thread then stays in this process until it exits.
    return run_watched(entry_point(request.method), request, reporter)


def _check_started(started: Any) -> None:
    """Raise `_NotStarted` when the controller died before it was ready."""
    import ray

    try:
        ray.get(started, timeout=10)
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as err:
        raise _NotStarted(str(err).splitlines()[0]) from None


def _result(ref: Any, reporter: Reporter) -> JobResult:
    """`ray.get(ref)` with Ray's wrapping removed."""
    import ray

    try:
        return get_unwrapped(ref, "the job controller")
    except ray.exceptions.RayActorError as err:
        if reporter.should_stop():
            raise Cancelled("job cancelled") from None
        raise EngineError(f"the job controller died: {err}", code="worker_lost") from None
