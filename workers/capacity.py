"""The workers' side of admission control: publish the Ray cluster's capacity, check it at claim time,
and refuse to start a second worker process that would run jobs on a Ray cluster of its own.

- `Publisher`: a daemon thread in every worker process that has joined Ray (started by the first
  job the process runs) writes each node's total and free CPUs and GPUs into `cluster_node` every
  `PUBLISH_S`. The API, which never imports ray, reads that table (`core.capacity`).
- `claim_check`: right before a job is claimed, its demand against Ray's live free capacity, so a
  job that cannot be placed now stays `queued` (`waiting_for_resources`, no attempt spent) instead
  of waiting for a placement group until it times out.
- `single_cluster_problem`: a job must never run twice at once. Two worker processes with private
  local Rays (`KEEL_RAY_ADDRESS` empty) cannot see each other's job controllers, so a re-queued
  job's new attempt could not stop a zombie one. Hence: with `--concurrency` above 1, or while
  another live worker publishes a different cluster, `keel worker` refuses to start unless all of
  them share `KEEL_RAY_ADDRESS`.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
import time
from typing import Any

from sqlalchemy.exc import DBAPIError, IntegrityError

from core.capacity import STALE_S, Admission, Node, admission, fresh_sources, job_demand, publish
from core.config import settings
from core.db import session_factory

log = logging.getLogger(__name__)

PUBLISH_S = 5.0
"""How often a worker process publishes the cluster's capacity."""
FOLLOW_S = 3.0
"""After a job ended, how long the publisher watches for Ray to free its share (`publish_soon`)."""
LOCAL_PREFIX = "local:"


def source() -> str:
    """This process's cluster as `cluster_node.source`: the shared address, or its private Ray."""
    return settings.RAY_ADDRESS or f"{LOCAL_PREFIX}{socket.gethostname()}:{os.getpid()}"


def snapshot() -> list[Node]:
    from engine.runtime.cluster import resource_snapshot

    return [Node(**n) for n in resource_snapshot()]


def joined() -> bool:
    """Whether this process is in a Ray cluster now. The publisher asks first: any Ray call after a
    `ray.shutdown()` would make Ray's auto-init start a fresh local cluster from this thread."""
    from engine.runtime.cluster import running_ray

    return running_ray() is not None


def publish_once() -> list[Node] | None:
    """Publish the live capacity now; returns it (None: this process is not in a cluster)."""
    if not joined():
        return None
    nodes = snapshot()
    with session_factory()() as db:
        try:
            publish(db, source(), nodes)
        except IntegrityError:  # another worker published the same nodes at the same moment
            db.rollback()
    return nodes


class Publisher(threading.Thread):
    def __init__(self, interval_s: float = PUBLISH_S) -> None:
        super().__init__(daemon=True, name="keel-capacity")
        self.interval_s = interval_s
        self.soon = threading.Event()
        """Set when a job ended: publish now, not at the next interval (see `publish_soon`)."""

    def run(self) -> None:
        while True:
            self.soon.clear()
            nodes = None
            try:
                nodes = publish_once()
            except DBAPIError as exc:  # the database is away: the rows go stale, the API stops using them
                log.warning("could not publish the cluster's capacity: %s", exc.__class__.__name__)
            except Exception:
                log.exception("could not read the cluster's capacity")
            if self.soon.wait(self.interval_s) and nodes is not None:
                _until_changed(nodes)


def _free(nodes: list[Node]) -> list[tuple[str, float, float]]:
    return sorted((n.node_id, n.cpus_available, n.gpus_available) for n in nodes)


def _until_changed(published: list[Node], limit_s: float = FOLLOW_S) -> None:
    """Ray frees an ended job's share a moment after the job returns: wait (at most `limit_s`) until
    the free capacity differs from what was published, so the next publish carries the freed share."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and joined() and _free(snapshot()) == _free(published):
        time.sleep(0.05)


_publisher: Publisher | None = None
_lock = threading.Lock()


def start_publisher() -> None:
    """Start this process's publisher once (after it joined Ray)."""
    global _publisher
    with _lock:
        if _publisher is None:
            _publisher = Publisher()
            _publisher.start()


def publish_soon() -> None:
    """A job of this process ended: publish its freed share at once. Else the sweepers saw the cluster
    full for up to `PUBLISH_S` more, and the next job (a pipeline's next step) waited that long."""
    if _publisher is not None:
        _publisher.soon.set()


def claim_check(job_id: str, spec: dict[str, Any]) -> Admission:
    """The job's demand against the deployment caps and Ray's free capacity right now."""
    from engine.runtime.jobs import controller_alive

    if controller_alive(job_id):  # a leftover of this job: run_job kills it and reuses its share
        return Admission("ok")
    return admission(job_demand(spec), snapshot(), max_cpus=settings.MAX_JOB_CPUS, max_gpus=settings.MAX_JOB_GPUS)


# --- one cluster per deployment --------------------------------------------------------------------

def _alive_here(src: str) -> bool:
    """False for a `local:<this host>:<pid>` source whose process is gone (a crashed worker's rows), and
    for a loopback address nothing listens on: a Ray of this host that is gone (a stopped `keel up`'s)."""
    if not src.startswith(LOCAL_PREFIX):
        return not _loopback(src) or _listening(src)
    host, _, pid = src[len(LOCAL_PREFIX):].rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def single_cluster_problem(concurrency: int, *, ray_address: str | None = None,
                           max_age_s: float = STALE_S) -> str | None:
    """Why this worker must not start (None: it may), see the module docstring."""
    address = settings.RAY_ADDRESS if ray_address is None else ray_address
    if not address and concurrency > 1:
        return (f"--concurrency={concurrency} runs {concurrency} worker processes, each with a private local "
                "Ray: a job could then run twice at once. Set KEEL_RAY_ADDRESS to a shared Ray cluster "
                "(`ray start --head`), or run with --concurrency=1.")
    try:
        with session_factory()() as db:
            others = [s for s in fresh_sources(db, max_age_s) if s != address and _alive_here(s)]
    except DBAPIError:
        return None  # the database is not there yet: the worker waits for it like for anything else
    if others:
        return (f"another worker runs jobs on {', '.join(others)} (seen within the last {max_age_s:.0f} s); "
                f"this one would use {address or 'a private local Ray'}. Every worker of a deployment must "
                "share one Ray cluster (the same KEEL_RAY_ADDRESS), or a job could run twice at once.")
    return None
