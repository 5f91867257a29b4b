"""Prometheus metrics of the API process, served at `GET /metrics` (prometheus-client's text format).

- `keel_http_requests_total{method,route,status}` and `keel_http_request_duration_seconds{method,route}`
  (time to the response's first byte, so a long stream or download is not one huge observation).
  `route` is the route template (`/v1/jobs/{job_id}`), never the raw path: no ids in labels, and an
  unknown path is `unmatched`.
- `keel_sse_connections`: event streams open in this process.
- `keel_jobs{status}`, `keel_queue_depth{reason}`, `keel_queue_oldest_age_seconds`: read from the
  database at scrape time (one GROUP BY on the status index, one on the queued jobs), so every API
  process reports the same numbers; `keel_database_up` is 0 when those reads fail.
- `keel_trainers{status}` (interactive trainers, Tinker training clients included) and
  `keel_trainer_operations_queued`, read the same way.

No tenant (project) names or job ids are ever labels. With `KEEL_METRICS_TOKEN` set, a scrape needs
`Authorization: Bearer <token>`.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from starlette.types import Scope

from api.errors import problem_response
from core.clock import db_now
from core.config import settings
from core.db import session_factory
from core.models import Job, Trainer, TrainerOperation
from core.trainers import STATUSES as TRAINER_STATUSES

log = logging.getLogger(__name__)

JOB_STATUSES = ("queued", "running", "cancelling", "pausing", "paused", "succeeded", "failed", "cancelled")

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

REQUESTS = Counter("keel_http_requests", "HTTP requests answered, by route template and status.",
                   ["method", "route", "status"], registry=REGISTRY)
LATENCY = Histogram("keel_http_request_duration_seconds", "Seconds from request to the response's first byte.",
                    ["method", "route"], registry=REGISTRY,
                    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0))
SSE_CONNECTIONS = Gauge("keel_sse_connections", "Server-sent event streams open in this API process.",
                        registry=REGISTRY)


class JobsCollector(Collector):
    """Jobs by status and the queue, from the database at scrape time."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("keel_database_up", "1 when the scrape could read the job table.")
        try:
            with session_factory()() as db:
                by_status = dict(db.execute(select(Job.status, func.count()).group_by(Job.status)).all())
                trainers = dict(db.execute(select(Trainer.status, func.count()).group_by(Trainer.status)).all())
                waiting = db.scalar(select(func.count()).select_from(TrainerOperation)
                                    .where(TrainerOperation.status == "queued"))
                queued = db.execute(select(Job.queue_reason, func.count(), func.min(Job.created_at))
                                    .where(Job.status == "queued").group_by(Job.queue_reason)).all()
                now = db_now(db) if queued else None
        except Exception as exc:  # noqa: BLE001 - a scrape must answer even when the database does not
            log.warning("metrics: cannot read jobs: %s", exc.__class__.__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        jobs = GaugeMetricFamily("keel_jobs", "Jobs by status (all projects).", labels=["status"])
        for status in sorted(set(JOB_STATUSES) | set(by_status)):
            jobs.add_metric([status], by_status.get(status, 0))
        yield jobs
        # Interactive trainers, the Tinker room's training clients among them.
        by_trainer = GaugeMetricFamily("keel_trainers", "Interactive trainers by status (all projects; a Tinker "
                                       "training client is one).", labels=["status"])
        for status in sorted(set(TRAINER_STATUSES) | set(trainers)):
            by_trainer.add_metric([status], trainers.get(status, 0))
        yield by_trainer
        yield GaugeMetricFamily("keel_trainer_operations_queued", "Trainer operations waiting to run (all trainers).",
                                value=waiting or 0)
        depth = GaugeMetricFamily("keel_queue_depth", "Queued jobs, by why they wait (`none`: waiting for a "
                                  "worker or the project's running limit).", labels=["reason"])
        oldest = GaugeMetricFamily("keel_queue_oldest_age_seconds", "Age of the oldest queued job (0 when none).")
        counts = {"none": 0, "waiting_for_resources": 0}
        first = None
        for reason, count, created in queued:
            counts[reason or "none"] = counts.get(reason or "none", 0) + count
            if created is not None:
                first = created if first is None else min(first, created)
        for reason, count in sorted(counts.items()):
            depth.add_metric([reason], count)
        oldest.add_metric([], max(0.0, (now - first).total_seconds()) if first is not None else 0.0)
        yield depth
        yield oldest


REGISTRY.register(JobsCollector())


def route_label(scope: Scope) -> str:
    """The `route` label: the matched route's template, else `unmatched` (`api.middleware`)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else "unmatched"


router = APIRouter(tags=["health"])


@router.get("/metrics", include_in_schema=False, response_class=Response)
def scrape_metrics(request: Request) -> Response:
    """Prometheus text exposition of this API process (see the module doc)."""
    token = settings.METRICS_TOKEN
    if token:
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
            return problem_response(request, 401, "unauthorized", "Send the metrics token: "
                                    "`Authorization: Bearer <KEEL_METRICS_TOKEN>`.",
                                    headers={"WWW-Authenticate": "Bearer"})
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

