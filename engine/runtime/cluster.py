"""Connecting to Ray: an existing cluster by address, or a private local one on loopback."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
from typing import Any

from engine.errors import EngineError

# Without these, a local Ray advertises the host's non-loopback address and phones home. Only for
# the private local Ray: a driver joining a real cluster must find its node by the host's address.
_LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def connect(address: str | None = None, num_cpus: int | None = None) -> None:
    """Initialise Ray once per process: join `address` if given, else start a loopback-only local Ray."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not address:
        for key, value in _LOOPBACK_ENV.items():
            os.environ.setdefault(key, value)
    import ray

    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, namespace="keel", log_to_driver=False)
    else:
        # address="local": always a private cluster, never one that happens to run on this machine.
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 2, include_dashboard=False,
                 _node_ip_address="127.0.0.1", namespace="keel", log_to_driver=False)


def running_ray() -> Any:
    """The `ray` module when this process is in a Ray cluster, else None. Never imports Ray: a
    process that has not imported it (the in-process executor) is not in a cluster."""
    ray = sys.modules.get("ray")
    return ray if ray is not None and ray.is_initialized() else None


@functools.cache
def code_options() -> dict[str, Any]:
    """Actor options that let a Ray worker import Keel's code.

    Installed (the images: every node of a real cluster runs one), nothing is needed, and nothing is
    passed, so Ray can reuse its idle workers. From a source checkout the actors get this checkout on
    their `PYTHONPATH`: that only reaches processes on this host, which is what `make run` and the
    tests' single-host clusters are."""
    try:
        importlib.metadata.distribution("keel-rlhf")
        return {}
    except importlib.metadata.PackageNotFoundError:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        return {"runtime_env": {"env_vars": {"PYTHONPATH": pythonpath}}}


def resource_snapshot() -> list[dict[str, Any]]:
    """Every live node's CPUs and GPUs, total and free now: `{node_id, node_ip, cpus_total,
    cpus_available, gpus_total, gpus_available}` each (this process must be connected)."""
    import ray
    from ray._private import state  # per-node availability is a developer API of Ray's

    totals = state.total_resources_per_node()
    available = state.available_resources_per_node()
    ips = {n["NodeID"]: n.get("NodeManagerAddress", "") for n in ray.nodes() if n.get("Alive")}
    nodes = []
    for node_id, total in totals.items():
        if node_id not in ips:
            continue
        free = available.get(node_id, {})
        nodes.append({"node_id": node_id, "node_ip": ips[node_id],
                      "cpus_total": float(total.get("CPU", 0.0)), "cpus_available": float(free.get("CPU", 0.0)),
                      "gpus_total": float(total.get("GPU", 0.0)), "gpus_available": float(free.get("GPU", 0.0))})
    return nodes


def get_unwrapped(ref: Any, what: str) -> Any:
    """`ray.get(ref)` with the remote's own exception re-raised (its code and param intact) instead of
    Ray's wrapping; a failure with no such cause is `internal_error`, named by `what`. A dead actor's
    `RayActorError` passes through: callers word it (and may read it as a cancel)."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, BaseException):
            raise cause from None
        raise EngineError(f"{what} failed: {err}", code="internal_error") from None
