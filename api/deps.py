"""Annotated dependencies that handlers take as parameters: a DB session and the caller's project."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.errors import ApiError
from core.config import settings
from core.db import session_factory
from core.models import Project
from core.security import authenticate


async def get_db() -> AsyncIterator[Session]:
    # Making a session touches no connection, so it happens on the event loop (one thread hop fewer
    # per request); closing it may talk to the database, so that runs in a worker thread.
    session = session_factory()()
    try:
        yield session
    finally:
        with anyio.CancelScope(shield=True):  # a client that went away: still give the connection back
            await anyio.to_thread.run_sync(session.close)


SessionDep = Annotated[Session, Depends(get_db)]

bearer = HTTPBearer(auto_error=False, description="A project API key: `Authorization: Bearer keel_...`")


class _RateLimiter:
    """A token bucket per API key (per process): bursts up to a minute's budget, refills evenly."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, key: str, per_minute: int) -> float | None:
        """None if allowed, else seconds to wait."""
        if per_minute <= 0:
            return None
        rate = per_minute / 60.0
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(per_minute), now))
            tokens = min(float(per_minute), tokens + (now - last) * rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                return (1.0 - tokens) / rate
            self._buckets[key] = (tokens - 1.0, now)
            return None


rate_limiter = _RateLimiter()


def get_current_project(request: Request, db: SessionDep,
                        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Project:
    return check_project(request, db, credentials)


def check_project(request: Request, db: Session, credentials: HTTPAuthorizationCredentials | None) -> Project:
    """The key's project (401 / 429 otherwise); sets `request.state.project_id`."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(401, "unauthorized", "Missing API key: send `Authorization: Bearer <key>`.",
                       headers={"WWW-Authenticate": "Bearer"})
    project = authenticate(db, credentials.credentials)
    if project is None:
        raise ApiError(401, "unauthorized", "Invalid or revoked API key.", headers={"WWW-Authenticate": "Bearer"})
    wait = rate_limiter.check(credentials.credentials, settings.RATE_LIMIT_PER_MINUTE)
    if wait is not None:
        raise ApiError(429, "rate_limited", "Too many requests for this API key.",
                       headers={"Retry-After": str(max(1, int(wait + 0.999)))})
    request.state.project_id = project.id
    return project


CurrentProject = Annotated[Project, Depends(get_current_project)]
