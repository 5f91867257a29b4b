"""Prometheus metrics of a worker, served by its main Celery process on `KEEL_WORKER_METRICS_PORT`.

Jobs run in Celery's prefork children, and their steps in Ray actors that may live on other hosts,
so no process-local counter would see them. The main process reports instead what the job rows
say at scrape time about the jobs its own children hold: each attempt's `worker_id` starts with
`host:pid` of the child that claimed it (`workers.tasks.claim_job`), and the reporter keeps each
job's latest step metrics and heartbeats on the row. One query per scrape, over the running jobs.

- `keel_worker_jobs_running{method}`: jobs this worker's processes are running.
- `keel_worker_step_seconds{method}`: the latest step's duration (`timing_s/step`), mean over them.
- `keel_worker_tokens_per_second{method}`: their latest throughput, summed.
- `keel_worker_heartbeat_age_seconds`: the oldest of their worker heartbeats (database clock).
- `keel_worker_processes`: pool processes; `keel_worker_database_up`: 0 when the read failed.

Labels never carry a project or a job id.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import psutil
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import select

from core.clock import db_now
from core.config import settings
from core.db import session_factory
from core.models import Job
from workers.reporter import ACTIVE

log = logging.getLogger(__name__)


def pool_pids() -> set[int]:
    """This process and its direct children (Celery's prefork pool)."""
    me = psutil.Process()
    return {me.pid, *(child.pid for child in me.children(recursive=False))}


def tokens_per_second(values: dict[str, Any]) -> float | None:
    """A job's throughput from its latest step metrics: the trainers' `perf/tokens_per_s`, or PPO's
    tokens of the step over the step's time."""
    tps = values.get("perf/tokens_per_s")
    if _number(tps):
        return float(tps)
    tokens, seconds = values.get("perf/total_num_tokens"), values.get("timing_s/step")
    if _number(tokens) and _number(seconds) and seconds > 0:
        return float(tokens) / float(seconds)
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class WorkerCollector(Collector):
    """The running jobs of this worker's processes, from the database at scrape time."""

    def __init__(self, pids: Callable[[], set[int]] = pool_pids, host: str | None = None) -> None:
        self.pids = pids
        self.host = host or socket.gethostname()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("keel_worker_database_up", "1 when the scrape could read the job table.")
        pids = self.pids()
        processes = GaugeMetricFamily("keel_worker_processes", "This worker's processes (main and pool).")
        processes.add_metric([], len(pids))
        yield processes
        try:
            with session_factory()() as db:
                rows = db.execute(select(Job.method, Job.worker_id, Job.latest_metrics, Job.heartbeat_at)
                                  .where(Job.status.in_(ACTIVE), Job.worker_id.like(f"{self.host}:%"))).all()
                now = db_now(db) if rows else None
        except Exception as exc:  # noqa: BLE001 - a scrape must answer even when the database does not
            log.warning("worker metrics: cannot read jobs: %s", exc.__class__.__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up

        running: dict[str, int] = defaultdict(int)
        steps: dict[str, list[float]] = defaultdict(list)
        tokens: dict[str, float] = defaultdict(float)
        oldest = None
        for method, worker_id, values, beat in rows:
            parts = (worker_id or "").split(":")
            if len(parts) < 2 or not parts[1].isdigit() or int(parts[1]) not in pids:
                continue  # another worker on this host
            running[method] += 1
            values = values if isinstance(values, dict) else {}
            if _number(values.get("timing_s/step")):
                steps[method].append(float(values["timing_s/step"]))
            if (tps := tokens_per_second(values)) is not None:
                tokens[method] += tps
            if beat is not None:
                age = (now - beat).total_seconds()
                oldest = age if oldest is None else max(oldest, age)

        jobs = GaugeMetricFamily("keel_worker_jobs_running", "Jobs this worker's processes are running.",
                                 labels=["method"])
        for method in ("sft", "reward_model", "rm_distill", "dpo", "ppo", "distill_policy"):
            jobs.add_metric([method], running.get(method, 0))
        yield jobs
        step = GaugeMetricFamily("keel_worker_step_seconds", "Latest step duration of the running jobs (mean).",
                                 labels=["method"])
        for method, seconds in sorted(steps.items()):
            step.add_metric([method], sum(seconds) / len(seconds))
        yield step
        tps = GaugeMetricFamily("keel_worker_tokens_per_second", "Latest throughput of the running jobs (sum).",
                                labels=["method"])
        for method, value in sorted(tokens.items()):
            tps.add_metric([method], value)
        yield tps
        age = GaugeMetricFamily("keel_worker_heartbeat_age_seconds",
                                "Age of the oldest worker heartbeat among the running jobs (0 when none).")
        age.add_metric([], max(0.0, oldest) if oldest is not None else 0.0)
        yield age


def registry(collector: WorkerCollector | None = None) -> CollectorRegistry:
    reg = CollectorRegistry()
    ProcessCollector(registry=reg)
    reg.register(collector or WorkerCollector())
    return reg


_server: Any = None


def start() -> None:
    """Serve the metrics from this (the main) process, if `KEEL_WORKER_METRICS_PORT` is set."""
    global _server
    port = settings.WORKER_METRICS_PORT
    if not port or _server is not None:
        return
    try:
        _server, _ = start_http_server(port, addr=settings.WORKER_METRICS_HOST, registry=registry())
    except OSError as exc:  # a busy port must not keep the worker from running jobs
        log.error("worker metrics: cannot listen on %s:%s: %s", settings.WORKER_METRICS_HOST, port, exc)
        return
    log.info("worker metrics on http://%s:%s/metrics (pid %d)", settings.WORKER_METRICS_HOST, port, os.getpid())


def stop() -> None:
    global _server
    if _server is not None:
        _server.shutdown()
        _server.server_close()
        _server = None
