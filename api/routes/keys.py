"""The project's API keys, for admin keys: list, create, revoke.

A key's secret is shown once, in the answer to its creation; lists and revocations show its prefix
only. Revocation is immediate: the API's key cache (`core.key_cache`) is emptied in every process
when it commits, and the key's open event streams close. Key creation takes no `Idempotency-Key`: replaying it would mean storing the secret.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi import Path as PathParam
from sqlalchemy import func, select

from api.deps import AdminCaller, SessionDep
from api.errors import ApiError, not_found, problem_responses
from api.pagination import AfterQuery, LimitQuery, page_of, paginate
from api.schemas.keys import ApiKeyCreate, ApiKeyCreated, ApiKeyPublic, ApiKeysPublic
from core.config import settings
from core.models import ApiKey, Project
from core.security import issue_api_key, revoke_api_key, tinker_api_key

router = APIRouter(prefix="/v1/keys", tags=["keys"])


def _unix(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


def key_public(row: ApiKey) -> ApiKeyPublic:
    return ApiKeyPublic(id=row.id, name=row.name, prefix=row.prefix, admin=bool(row.admin), project=row.project_id,
                        created_at=_unix(row.created_at), revoked_at=_unix(row.revoked_at))


@router.get("", summary="List API keys", response_model=ApiKeysPublic,
            responses=problem_responses(401, 403, 422, 429))
def list_keys(caller: AdminCaller, db: SessionDep, limit: LimitQuery = 20, after: AfterQuery = None):
    """The project's keys (revoked ones included), newest first, without their secrets."""
    rows, has_more = paginate(db, select(ApiKey).where(ApiKey.project_id == caller.project.id), ApiKey.id,
                              limit=limit, after=after)
    return page_of([key_public(r) for r in rows], has_more)


@router.post("", status_code=201, summary="Create an API key", response_model=ApiKeyCreated,
             responses=problem_responses(401, 403, 409, 422, 429))
def create_key(body: ApiKeyCreate, caller: AdminCaller, db: SessionDep):
    """A new key of the caller's project. The answer holds the secret `key`, shown this once. A project
    holds at most `KEEL_MAX_KEYS_PER_PROJECT` active keys (409 `too_many_keys`: revoke one first)."""
    cap = settings.MAX_KEYS_PER_PROJECT
    if cap > 0:
        # The project's row locked (PostgreSQL): concurrent creations count one after the other.
        db.execute(select(Project.id).where(Project.id == caller.project.id).with_for_update())
        active = db.scalar(select(func.count()).select_from(ApiKey).where(ApiKey.project_id == caller.project.id,
                                                                          ApiKey.revoked_at.is_(None)))
        if active >= cap:
            raise ApiError(409, "too_many_keys", f"The project has {active} active API keys, the deployment's "
                           "limit (KEEL_MAX_KEYS_PER_PROJECT); revoke one first.")
    row, key = issue_api_key(db, caller.project, admin=body.admin, name=body.name)
    db.commit()
    return ApiKeyCreated(**key_public(row).model_dump(), key=key, tinker_api_key=tinker_api_key(key))


def owned_key(key_id: Annotated[str, PathParam(max_length=64)], caller: AdminCaller, db: SessionDep) -> str:
    if db.scalar(select(ApiKey.id).where(ApiKey.id == key_id, ApiKey.project_id == caller.project.id)) is None:
        raise not_found("API key", key_id, param="key_id")
    return key_id


@router.delete("/{key_id}", summary="Revoke an API key", response_model=ApiKeyPublic,
               responses=problem_responses(401, 403, 404, 422, 429))
def revoke_key(key_id: Annotated[str, Depends(owned_key)], caller: AdminCaller, db: SessionDep):
    """Revoke one of the project's keys: from now on it is a 401. Revoking twice changes nothing."""
    row = revoke_api_key(db, caller.project.id, key_id)
    db.commit()
    return key_public(row)
