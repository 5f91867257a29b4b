"""A trainer's operations (each one, with an optional long-poll, and the list) and its event log (paged,
and live over server-sent events).

The long-poll and the stream hold no pooled connection while they wait: ownership is checked with a
short session of their own, and every later read opens and closes one (as the job event stream does).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy import select

from api import ratelimit, streams
from api.deps import SessionDep, bearer, check_project
from api.errors import not_found, problem_responses
from api.pagination import AfterQuery, LimitQuery, page_of, paginate
from api.routes.events import KEEPALIVE, SeqQuery, resume_after
from api.routes.trainers import OwnedTrainer, operation_public
from api.schemas.trainers import TrainerEventsPublic, TrainerOperationPublic, TrainerOperationsPublic
from core import logging as logcontext
from core import trainers
from core.db import session_factory
from core.models import Trainer, TrainerOperation

router = APIRouter(prefix="/v1/trainers", tags=["trainers"])

POLL_S = 0.25
"""How often a long-poll or a stream looks at the database again."""
MAX_WAIT_S = 60


def authorized_trainer(request: Request, trainer_id: Annotated[str, PathParam(max_length=64)],
                       credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> str:
    """Authenticate and check ownership with a short session closed before any waiting starts."""
    with session_factory()() as db:
        project = check_project(request, db, credentials)
        owner = db.scalar(select(Trainer.project_id).where(Trainer.id == trainer_id))
    if owner != project.id:
        raise not_found("trainer", trainer_id, param="trainer_id")
    logcontext.annotate(trainer_id=trainer_id)
    return trainer_id


AuthorizedTrainer = Annotated[str, Depends(authorized_trainer)]


def _read_operation(trainer_id: str, operation_id: str) -> TrainerOperationPublic | None:
    with session_factory()() as db:
        op = db.get(TrainerOperation, operation_id)
        return operation_public(op) if op is not None and op.trainer_id == trainer_id else None


@router.get("/{trainer_id}/operations/{operation_id}", summary="Retrieve a trainer operation",
            response_model=TrainerOperationPublic, responses=problem_responses(401, 404, 422, 429))
async def get_trainer_operation(
        trainer_id: AuthorizedTrainer, operation_id: Annotated[str, PathParam(max_length=64)],
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S, description=(
            "Seconds to wait for the operation to finish before answering (a long-poll); 0 answers at once."))] = 0):
    """One operation: `queued`, `running`, then `succeeded` with its `result` or `failed` with its `error`."""
    op = await to_thread.run_sync(_read_operation, trainer_id, operation_id)
    if op is None:
        raise not_found("operation", operation_id, param="operation_id")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while op.status not in trainers.OPERATION_DONE and loop.time() < deadline:
        await asyncio.sleep(min(POLL_S, max(0.0, deadline - loop.time())))
        op = await to_thread.run_sync(_read_operation, trainer_id, operation_id) or op
    return op


@router.get("/{trainer_id}/operations", summary="List trainer operations", response_model=TrainerOperationsPublic,
            responses=problem_responses(401, 404, 422, 429))
def list_trainer_operations(trainer: OwnedTrainer, db: SessionDep, limit: LimitQuery = 20, after: AfterQuery = None):
    """The trainer's operations, newest first, with the tokens each processed."""
    rows, has_more = paginate(db, select(TrainerOperation).where(TrainerOperation.trainer_id == trainer.id),
                              TrainerOperation.id, limit=limit, after=after)
    return page_of([operation_public(op) for op in rows], has_more)


@router.get("/{trainer_id}/events", summary="List trainer events", response_model=TrainerEventsPublic,
            responses=problem_responses(401, 404, 422, 429))
def list_trainer_events(trainer: OwnedTrainer, db: SessionDep, after: SeqQuery = 0,
                        limit: Annotated[int, Query(ge=1, le=1000, description="Page size (1-1000).")] = 100):
    """The trainer's events oldest first, after the `seq` cursor `after`: every call (with the tokens it
    processed), status changes, saved models and warnings."""
    rows = trainers.read_events(db, trainer.id, after=after, limit=limit + 1)
    data = [trainers.event_public(e) for e in rows[:limit]]
    return {"object": "list", "data": data, "has_more": len(rows) > limit,
            "last_seq": data[-1]["seq"] if data else None}


# -- the stream ------------------------------------------------------------------------------------

def _read_after(trainer_id: str, after: int) -> tuple[list[dict[str, Any]], str | None]:
    """(events after `after`, the trainer's status) in one short session."""
    with session_factory()() as db:
        events = [trainers.event_public(e) for e in trainers.read_events(db, trainer_id, after=after, limit=500)]
        status = db.scalar(select(Trainer.status).where(Trainer.id == trainer_id))
    return events, status


def _sse(event: dict[str, Any]) -> bytes:
    data = json.dumps(event, separators=(",", ":"), default=str)
    return f"event: {event['type']}\ndata: {data}\nid: {event['seq']}\n\n".encode()


async def _follow(trainer_id: str, after: int) -> AsyncIterator[bytes]:
    """Events after the cursor, then new ones as they are committed; ends once the trainer has ended
    (deleted or failed) and its last event is sent."""
    loop = asyncio.get_running_loop()
    cursor, last_sent = after, loop.time()
    ping = streams.ping_interval()
    while True:
        events, status = await to_thread.run_sync(_read_after, trainer_id, cursor)
        for event in events:
            cursor = event["seq"]
            yield _sse(event)
        if events:
            last_sent = loop.time()
            if len(events) == 500:
                continue
        if status is None or status in trainers.ENDED:
            return
        if loop.time() - last_sent >= ping:
            yield KEEPALIVE
            last_sent = loop.time()
        await asyncio.sleep(POLL_S * 2)


_SSE_ITEM = {
    "type": "object", "required": ["data"],
    "properties": {"data": {"type": "string", "contentMediaType": "application/json",
                            "contentSchema": {"$ref": "#/components/schemas/TrainerEventPublic"}},
                   "event": {"type": "string"}, "id": {"type": "string"}, "retry": {"type": "integer", "minimum": 0}}}


@router.get("/{trainer_id}/events/stream", summary="Stream trainer events", response_class=StreamingResponse,
            responses={200: {"description": "Server-sent events: `id` = seq, `event` = type, `data` = the event as "
                                            "JSON (TrainerEventPublic).",
                             "content": {"text/event-stream": {"itemSchema": _SSE_ITEM}}},
                       **problem_responses(401, 404, 422, 429)})
async def stream_trainer_events(request: Request, trainer_id: AuthorizedTrainer,
                                after: Annotated[int, Depends(resume_after)]) -> StreamingResponse:
    """The trainer's events replayed after the cursor (`Last-Event-ID` or `after`), then live; ends when the
    trainer is deleted. Counts against the key's `KEEL_MAX_STREAMS_PER_KEY` like job streams."""
    return await ratelimit.event_stream(request.state.caller.key_id, _follow(trainer_id, after))
