"""Annotated dependencies that handlers take as parameters: a DB session and the caller's project."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api import ratelimit
from api.errors import ApiError
from core.config import settings
from core.db import session_factory
from core.models import Project
from core.security import Caller, identify_remembering, remembered_caller


async def get_db() -> AsyncIterator[Session]:
    # Making a session touches no connection, so it happens on the event loop (one thread hop fewer
    # per request). Closing one that holds a transaction talks to the database (a rollback), so that
    # runs in a worker thread; a handler that committed or closed it leaves nothing to talk about.
    session = session_factory()()
    try:
        yield session
    finally:
        if session.in_transaction():
            with anyio.CancelScope(shield=True):  # a client that went away: still give the connection back
                await anyio.to_thread.run_sync(session.close)
        else:
            session.close()


SessionDep = Annotated[Session, Depends(get_db)]

bearer = HTTPBearer(auto_error=False, description="A project API key: `Authorization: Bearer keel_...`")


async def _authenticated(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Caller:
    """`check_project` on the event loop: a key in the key cache (`core.key_cache`) and the rate
    limiter's Redis round trip need no worker thread; only a key not cached is looked up in one, in a
    session of its own (a handler that needs none opens none). Once per request: a route that takes
    both `CurrentProject` and `CurrentCaller` is admitted (and counted) by the first of them."""
    admitted = getattr(request.state, "caller", None)
    if admitted is not None:
        return admitted
    return await admit_key(request, _bearer_key(credentials))


async def admit_key(request: Request, key: str) -> Caller:
    """The caller of `key`, admitted as every keyed request is (401, the failure and rate limits, the
    request's state): also the Tinker room's, whose key travels in another header."""
    caller = remembered_caller(key) or await run_in_threadpool(_identify, key, _client(request))
    _admit(request, caller, await ratelimit.rate_limiter.acheck(caller.key_id, settings.RATE_LIMIT_PER_MINUTE))
    return caller


def _client(request: Request) -> str:
    # The peer, or the client a trusted proxy names (uvicorn's proxy headers, KEEL_FORWARDED_ALLOW_IPS).
    return request.client.host if request.client is not None else "unknown"


def _identify(key: str, client: str) -> Caller:
    with session_factory()() as db:
        return _guarded(db, key, client)


def _guarded(db: Session, key: str, client: str) -> Caller:
    """The key's caller, looked up only while `client` has failed authentication fewer than
    `KEEL_AUTH_FAILURES_PER_MINUTE` times in the last minute (429 then); a failure counts (401)."""
    limit = settings.AUTH_FAILURES_PER_MINUTE
    budget = ratelimit.auth_failures.check(client, limit, count=False)
    if budget is not None and not budget.allowed:
        raise _too_many_failures(budget)
    caller = identify_remembering(db, key)
    if caller is None:
        budget = ratelimit.auth_failures.check(client, limit)
        if budget is not None and not budget.allowed:
            raise _too_many_failures(budget)
    return _known(caller)


def _too_many_failures(budget: ratelimit.Budget) -> ApiError:
    return ApiError(429, "too_many_auth_failures", "Too many requests with invalid API keys from this address.",
                    headers={"Retry-After": str(max(1, budget.reset_s))})


def check_project(request: Request, db: Session, credentials: HTTPAuthorizationCredentials | None) -> Project:
    """The key's project (401 / 429 otherwise); sets `request.state.project_id`, `.caller` (the key's
    id and scope) and `.rate_limit` (the budget the `X-RateLimit-*` headers show). Blocking: for
    routes that authenticate inside a worker thread of their own."""
    key = _bearer_key(credentials)
    caller = remembered_caller(key) or _guarded(db, key, _client(request))
    return _admit(request, caller, ratelimit.rate_limiter.check(caller.key_id, settings.RATE_LIMIT_PER_MINUTE))


def _bearer_key(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(401, "unauthorized", "Missing API key: send `Authorization: Bearer <key>`.",
                       headers={"WWW-Authenticate": "Bearer"})
    return credentials.credentials


def _known(caller: Caller | None) -> Caller:
    if caller is None:
        raise ApiError(401, "unauthorized", "Invalid or revoked API key.", headers={"WWW-Authenticate": "Bearer"})
    return caller


def _admit(request: Request, caller: Caller, budget: ratelimit.Budget | None) -> Project:
    request.state.rate_limit = budget
    if budget is not None and not budget.allowed:
        raise ApiError(429, "rate_limited", "Too many requests for this API key.", headers=budget.headers())
    request.state.project_id = caller.project.id
    request.state.caller = caller
    return caller.project


class _ApiKey(HTTPBearer):
    """The bearer scheme, authenticating as it reads the header: one dependency with no sub-dependency
    for FastAPI to solve per request (rather than an authenticating dependency on `bearer`). Documented
    as `bearer` is (the same scheme name and model), so the OpenAPI document does not change."""

    def __init__(self, *, project: bool) -> None:
        super().__init__(auto_error=False, description=bearer.model.description, scheme_name=bearer.scheme_name)
        self.project = project

    async def __call__(self, request: Request) -> Any:  # type: ignore[override]
        caller = await _authenticated(request, await super().__call__(request))
        return caller.project if self.project else caller


get_current_project = _ApiKey(project=True)
"""The caller's project (see `_authenticated`)."""
CurrentProject = Annotated[Project, Depends(get_current_project)]

get_caller = _ApiKey(project=False)
"""The authenticated key behind the request (its project, id and scope)."""
CurrentCaller = Annotated[Caller, Depends(get_caller)]


async def get_admin(caller: CurrentCaller) -> Caller:
    """An admin key, else 403."""
    if not caller.admin:
        raise ApiError(403, "forbidden", "This route needs an admin API key (`keel keys create --admin`).")
    return caller


AdminCaller = Annotated[Caller, Depends(get_admin)]
