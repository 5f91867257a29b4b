"""`retrieve_future`: what became of a request the room answered with a `request_id`.

The answer is long-polled: the route re-reads the request's row until it is done or `POLL_S` passed
(under the client's 45 s timeout), then answers one of

- `{"type": "try_again", "queue_state": ...}` while it waits: `active` when it is running or its
  trainer's worker holds it; `paused_capacity` while it waits its turn behind other training clients
  sharing its base model's host (`core.trainers.queue_state`), or has waited `CAPACITY_AFTER_S` with
  no worker on it (no room on the cluster for its actor yet);
- the result: JSON, or protobuf bytes for the kinds the client reads only that way
  (forward / forward_backward, sampling);
- `{"error", "category"}`: `user` for bad input (the message names the field), `server` for a system
  error (a generic message with the `error_id` the deployment's logs hold).

Request ids are Keel ids, and their prefix says what they are: `op-...` a trainer operation (its
result is rendered by the encoder of the Tinker request that queued it, `encoder`), `trainer-...`
a `create_model`. Other parts of the room add their kinds with `resolver`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.errors import ApiError
from api.schemas.text import NulFree
from api.tinker.auth import TinkerCaller
from core.db import session_factory
from core.models import Trainer, TrainerOperation
from core.tinker import TinkerModel, TinkerRequest
from core.trainers import queue_state as trainer_queue_state

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1", include_in_schema=False)

POLL_S = 25.0
"""How long one retrieve_future waits for a result before answering try_again."""
FAST_POLL_S = 5.0
"""For this long a request is re-read every 0.1 s at most, then every 0.5 s."""
CAPACITY_AFTER_S = 3.0
PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class Pending:
    queue_state: str = "active"
    reason: str | None = None


@dataclass(frozen=True)
class Failed:
    error: str
    category: str = "user"


Outcome = Pending | Failed | dict | bytes
"""A result is a JSON object, or protobuf bytes."""
Resolver = Callable[[Session, str, str], Outcome | None]
"""`(db, project id, request id) -> outcome`, None when the project has no such request."""
Encoder = Callable[[Session, TrainerOperation, TinkerModel], dict | bytes]
"""A succeeded operation's result as the Tinker request that queued it answers it."""

_RESOLVERS: dict[str, Resolver] = {}
_ENCODERS: dict[str, Encoder] = {}


def resolver(prefix: str) -> Callable[[Resolver], Resolver]:
    """Register the resolver of request ids `<prefix>-...`."""
    def register(fn: Resolver) -> Resolver:
        _RESOLVERS[prefix] = fn
        return fn
    return register


def encoder(kind: str) -> Callable[[Encoder], Encoder]:
    """Register how a succeeded operation queued as Tinker request `kind` (`tinker_request.kind`) answers."""
    def register(fn: Encoder) -> Encoder:
        _ENCODERS[kind] = fn
        return fn
    return register


def operation_error(error: dict[str, Any] | None) -> Failed:
    """A failed operation as Tinker's failure: a system error (it has an `error_id`) is `server`."""
    error = error if isinstance(error, dict) else {}
    message = str(error.get("message") or "the request failed")
    param = error.get("param")
    if isinstance(param, str) and param and param not in message:
        message = f"{param}: {message}"
    return Failed(message, "server" if error.get("error_id") else "user")


def _queue_state(db: Session, op: TrainerOperation) -> Pending:
    trainer = db.get(Trainer, op.trainer_id)
    if op.status == "running" or trainer is None:
        return Pending("active")
    if trainer_queue_state(db, trainer) == "paused_capacity":
        return Pending("paused_capacity", "waiting its turn behind other training clients of the same base model")
    now = datetime.now(UTC)
    held = trainer.lease_until is not None and trainer.lease_until > now
    if not held and op.created_at is not None and now - op.created_at > timedelta(seconds=CAPACITY_AFTER_S):
        return Pending("paused_capacity", "waiting for room on the cluster for this model")
    return Pending("active")


@resolver("op")
def _operation(db: Session, project_id: str, request_id: str) -> Outcome | None:
    op = db.get(TrainerOperation, request_id)
    if op is None or op.project_id != project_id:
        return None
    if op.status == "failed":
        return operation_error(op.error)
    if op.status != "succeeded":
        return _queue_state(db, op)
    row = db.execute(select(TinkerRequest, TinkerModel).join(TinkerModel, TinkerModel.id == TinkerRequest.model_id)
                     .where(TinkerRequest.operation_id == op.id)).first()
    if row is None:  # an operation of /v1/trainers: its result as the native route shows it
        return dict(op.result or {})
    request, model = row
    encode = _ENCODERS.get(request.kind)
    try:
        if encode is None:
            raise LookupError(f"no encoder for {request.kind} requests")
        return encode(db, op, model)
    except Exception:  # a 500 would have the client re-poll forever
        log.exception("tinker: the result of operation %s cannot be rendered", op.id)
        return Failed(f"An internal error occurred; quote request id {op.id} when reporting it.", "server")


@resolver("trainer")
def _created_model(db: Session, project_id: str, request_id: str) -> Outcome | None:
    model = db.scalar(select(TinkerModel).where(TinkerModel.trainer_id == request_id,
                                                TinkerModel.project_id == project_id))
    return None if model is None else {"type": "create_model", "model_id": model.id}


def resolve(project_id: str, request_id: str) -> Outcome | None:
    fn = _RESOLVERS.get(request_id.split("-", 1)[0])
    if fn is None:
        return None
    with session_factory()() as db:
        return fn(db, project_id, request_id)


class RetrieveFuture(NulFree):  # NUL in the id: a 422 at request_id (PostgreSQL cannot compare it)
    model_config = ConfigDict(extra="ignore")

    request_id: Annotated[str, Field(min_length=1, max_length=200)]
    allow_metadata_only: bool = False


def render(request_id: str, outcome: Outcome) -> Response:
    if isinstance(outcome, Pending):
        body = {"type": "try_again", "request_id": request_id, "queue_state": outcome.queue_state}
        if outcome.reason:
            body["queue_state_reason"] = outcome.reason
        return JSONResponse(body)
    if isinstance(outcome, Failed):
        return JSONResponse({"error": outcome.error, "category": outcome.category})
    if isinstance(outcome, bytes):
        return Response(outcome, media_type=PROTOBUF)
    return JSONResponse(outcome)


@router.post("/retrieve_future")
async def retrieve_future(body: RetrieveFuture, caller: TinkerCaller) -> Response:
    """The request's result, error or `try_again`, waiting up to `POLL_S` for it to finish."""
    start = time.monotonic()
    delay = 0.02
    while True:
        outcome = await run_in_threadpool(resolve, caller.project.id, body.request_id)
        if outcome is None:
            raise ApiError(404, "not_found", f"No request with id {body.request_id!r}.", param="request_id")
        waited = time.monotonic() - start
        if not isinstance(outcome, Pending) or waited + delay > POLL_S:
            return render(body.request_id, outcome)
        await asyncio.sleep(delay)
        # Most operations take a fraction of a second: look often at first, rarely once one runs long.
        delay = min(delay * 1.5, 0.1 if waited < FAST_POLL_S else 0.5)
