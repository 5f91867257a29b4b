"""A job's event log: paged, as metric time series, and live over server-sent events."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy import select

from api import ratelimit, streams
from api.deps import SessionDep, bearer, check_project
from api.errors import ApiError, not_found, problem_responses
from api.routes.jobs import OwnedJob
from api.schemas.jobs import JobEventsPublic, JobMetricsPublic
from core import logging as logcontext
from core.db import session_factory
from core.events import event_payload, read_events
from core.models import Job, JobEvent

router = APIRouter(prefix="/v1/jobs", tags=["events"])

SeqQuery = Annotated[int, Query(ge=0, le=2**31 - 1, description="Return events with a larger `seq` than this.")]


def event_public(payload: dict[str, Any]) -> dict[str, Any]:
    """core.events' payload (DB row or Redis message) -> the JobEventPublic shape."""
    return {"object": "job.event", "seq": payload["seq"], "type": payload["type"], "data": payload.get("data") or {},
            "created_at": streams.unix_seconds(payload.get("created_at"))}


@router.get("/{job_id}/events", summary="List job events", response_model=JobEventsPublic,
            responses=problem_responses(401, 404, 422, 429))
def list_job_events(job: OwnedJob, db: SessionDep, after: SeqQuery = 0,
                    limit: Annotated[int, Query(ge=1, le=1000, description="Page size (1-1000).")] = 100):
    """The job's events oldest first, after the `seq` cursor `after`."""
    rows = read_events(db, job.id, after=after, limit=limit + 1)
    data = [event_public(event_payload(e)) for e in rows[:limit]]
    return {"object": "list", "data": data, "has_more": len(rows) > limit,
            "last_seq": data[-1]["seq"] if data else None}


def _downsample(points: list[tuple[int, float]], max_points: int) -> list[tuple[int, float]]:
    """Evenly strided, first and last kept."""
    n = len(points)
    if n <= max_points:
        return points
    return [points[round(i * (n - 1) / (max_points - 1))] for i in range(max_points)]


@router.get("/{job_id}/metrics", summary="List job metrics", response_model=JobMetricsPublic,
            responses=problem_responses(401, 404, 422, 429))
def list_job_metrics(job: OwnedJob, db: SessionDep,
                     names: Annotated[list[str] | None, Query(max_length=100, description=(
                         "Only these metrics (repeat the parameter, or separate names with commas)."))] = None,
                     max_points: Annotated[int, Query(ge=2, le=10_000, description=(
                         "Longer series are downsampled to this many evenly spaced points."))] = 500):
    """Time series per metric name (step, value), from the job's metrics events."""
    wanted = {n.strip() for item in names or () for n in item.split(",") if n.strip()} or None
    series: dict[str, dict[int, float]] = {}
    rows = db.scalars(select(JobEvent.data).where(JobEvent.job_id == job.id, JobEvent.type == "job.metrics")
                      .order_by(JobEvent.seq).execution_options(yield_per=1000))
    for data in rows:
        step, values = data.get("step"), data.get("values")
        if not isinstance(step, int) or isinstance(step, bool) or not isinstance(values, dict):
            continue
        for name, value in values.items():
            if wanted is not None and name not in wanted:
                continue
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                series.setdefault(name, {})[step] = float(value)  # a repeated step: the latest value wins
    data = []
    for name in sorted(series):
        points = sorted(series[name].items())
        kept = _downsample(points, max_points)
        data.append({"name": name, "steps": [s for s, _ in kept], "values": [v for _, v in kept],
                     "points": len(points)})
    return {"object": "job.metrics", "job_id": job.id, "data": data}


def resume_after(after: SeqQuery = 0, last_event_id: Annotated[str | None, Header(
        alias="Last-Event-ID", max_length=20,
        description="Resume after this seq (EventSource sends it on reconnect); takes precedence over `after`.")]
                 = None) -> int:
    """The stream's cursor: the `Last-Event-ID` header, else `after`."""
    if last_event_id is None or not last_event_id.strip():
        return after
    if not last_event_id.strip().isdigit():
        raise ApiError(422, "invalid_request", "Last-Event-ID must be an event seq.", param="Last-Event-ID")
    return int(last_event_id.strip())


def streamed_job_id(request: Request, job_id: Annotated[str, PathParam(max_length=64)],
                    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> str:
    """Authenticate and check ownership in one thread hop with a short session of its own, closed before
    the stream starts: a stream holds no pooled connection, so a storm of connects cannot exhaust the pool
    (requests holding a connection between hops while every thread waits for one: a deadlock)."""
    with session_factory()() as db:
        project = check_project(request, db, credentials)
        owner = db.scalar(select(Job.project_id).where(Job.id == job_id))
    if owner != project.id:
        raise not_found("job", job_id, param="job_id")
    logcontext.annotate(job_id=job_id)
    return job_id


_SSE_ITEM = {
    "type": "object", "required": ["data"],
    "properties": {"data": {"type": "string", "contentMediaType": "application/json",
                            "contentSchema": {"$ref": "#/components/schemas/JobEventPublic"}},
                   "event": {"type": "string"}, "id": {"type": "string"}, "retry": {"type": "integer", "minimum": 0}}}
"""The item schema FastAPI declares for an SSE generator of JobEventPublic (this route streams bytes itself)."""

KEEPALIVE = b": ping\n\n"


def sse_bytes(payload: dict[str, Any]) -> bytes:
    """The event as an SSE message, encoded once: a live payload is one dict shared by every subscriber
    of this process, so the first subscriber's encoding is reused by the rest."""
    encoded = payload.get("_sse")
    if encoded is None:
        public = event_public(payload)
        try:
            data = json.dumps(public, separators=(",", ":"), allow_nan=False)
        except ValueError:  # NaN / infinity in the event data: null, as FastAPI's encoder does
            data = json.dumps(_finite(public), separators=(",", ":"))
        encoded = payload["_sse"] = f"event: {payload['type']}\ndata: {data}\nid: {payload['seq']}\n\n".encode()
    return encoded


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


async def _sse(job_id: str, after: int) -> AsyncIterator[bytes]:
    async for payload in streams.follow(job_id, after, ping_s=streams.ping_interval()):
        yield KEEPALIVE if payload is None else sse_bytes(payload)


@router.get("/{job_id}/events/stream", summary="Stream job events", response_class=StreamingResponse,
            responses={200: {"description": "Server-sent events: `id` = seq, `event` = type, `data` = the "
                                            "event as JSON (JobEventPublic).",
                             "content": {"text/event-stream": {"itemSchema": _SSE_ITEM}}},
                       **problem_responses(401, 404, 422, 429)})
async def stream_job_events(request: Request, job_id: Annotated[str, Depends(streamed_job_id)],
                            after: Annotated[int, Depends(resume_after)]) -> StreamingResponse:
    """The job's events replayed after the cursor, then live; ends after `job.done`. One API key holds
    at most the deployment's `KEEL_MAX_STREAMS_PER_KEY` streams at once (a 429 `too_many_streams` beyond)."""
    # The slot is taken here, after every check that could still refuse the request (nothing to give back).
    return await ratelimit.event_stream(request.state.caller.key_id, _sse(job_id, after))
