"""Who calls the Tinker room: the `X-API-Key` header with a `tml-` key.

The Tinker client refuses keys that do not start with `tml-`, so Keel hands out each key in that form
too (`tinker_api_key` when a key is created): `tml-<keel key>` is the same key, with the same project,
revocation, rate limit and failure limit (`api.deps.admit_key`). A plain Keel key in `X-API-Key`, or
as a bearer token, is taken as well.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from api.deps import admit_key
from api.errors import ApiError
from core.models import Project
from core.security import Caller, from_tinker_key


async def tinker_caller(request: Request) -> Caller:
    admitted = getattr(request.state, "caller", None)
    if admitted is not None:
        return admitted
    key = request.headers.get("x-api-key", "").strip()
    if not key:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else ""
    if not key:
        # The same challenge as the native routes' 401 (api.deps), so a client sees one scheme everywhere.
        raise ApiError(401, "unauthorized", "Missing API key: send `X-API-Key: tml-<your Keel key>`.",
                       headers={"WWW-Authenticate": "Bearer"})
    return await admit_key(request, from_tinker_key(key))


async def tinker_project(caller: Annotated[Caller, Depends(tinker_caller)]) -> Project:
    return caller.project


TinkerCaller = Annotated[Caller, Depends(tinker_caller)]
TinkerProject = Annotated[Project, Depends(tinker_project)]
