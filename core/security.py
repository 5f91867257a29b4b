"""API keys: shown once, stored as an HMAC, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import key_cache
from core.config import settings
from core.db import get_engine
from core.models import ApiKey, Project

KEY_PREFIX = "keel_"
_LOOKUP_LEN = 12  # "keel_" + 7 random chars: enough to find the row, useless to an attacker
TINKER_KEY_PREFIX = "tml-"
"""The Tinker client refuses keys without it: `tml-<keel key>` is the same key in Tinker's form."""


def hash_key(key: str) -> str:
    return hmac.new(settings.SECRET_KEY.encode(), key.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Caller:
    """Who is calling: the key's project, the key's id (jobs record it) and its scope."""

    project: Project
    key_id: str
    admin: bool


def issue_api_key(db: Session, project: Project, *, admin: bool = False, name: str | None = None) -> tuple[ApiKey, str]:
    """A new key row for `project` and the key itself, which is never stored (only its hash)."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(project_id=project.id, prefix=key[:_LOOKUP_LEN], hash=hash_key(key), admin=admin, name=name)
    db.add(row)
    db.flush()
    return row, key


def create_api_key(db: Session, project: Project, *, admin: bool = False, name: str | None = None) -> str:
    """Create a key for `project` and return it; only its hash is stored."""
    return issue_api_key(db, project, admin=admin, name=name)[1]


def tinker_api_key(key: str) -> str:
    """A Keel key as the Tinker room takes it (same project, revocation and limits)."""
    return TINKER_KEY_PREFIX + key


def from_tinker_key(key: str) -> str:
    """The Keel key inside a `tml-` key; anything else comes back unchanged (and fails as a Keel key)."""
    return key.removeprefix(TINKER_KEY_PREFIX)


def _well_formed(key: str) -> bool:
    return key.startswith(KEY_PREFIX) and len(key) <= 200


def identify(db: Session, key: str) -> Caller | None:
    """The caller behind an unrevoked key, or None. Every candidate is compared in constant time.
    Reads the database every time (the API goes through `remembered_caller` / `identify_remembering`)."""
    if not _well_formed(key):
        return None
    digest = hash_key(key)
    rows = db.execute(select(ApiKey.id, ApiKey.admin, ApiKey.hash, Project)
                      .join(Project, Project.id == ApiKey.project_id)
                      .where(ApiKey.prefix == key[:_LOOKUP_LEN], ApiKey.revoked_at.is_(None))).all()
    found = None
    for key_id, admin, stored, project in rows:  # one query; every candidate compared
        if hmac.compare_digest(stored, digest):
            found = Caller(project=project, key_id=key_id, admin=bool(admin))
    return found


def _detached(caller: Caller) -> Caller:
    """`caller` with a transient copy of its project: what the cache shares between requests holds
    nothing of the session that loaded it (handlers only read the project's columns)."""
    p = caller.project
    return Caller(project=Project(id=p.id, name=p.name, created_at=p.created_at), key_id=caller.key_id,
                  admin=caller.admin)


def remembered_caller(key: str) -> Caller | None:
    """The caller of `key` from this process's key cache (`core.key_cache`), without touching the
    database; None when it is not there (then `identify_remembering`)."""
    if not _well_formed(key):
        return None
    cache = key_cache.for_engine(get_engine())
    return cache.get(hash_key(key)) if cache is not None else None


def identify_remembering(db: Session, key: str) -> Caller | None:
    """`identify`, remembering a valid key in the key cache of `db`'s database."""
    if not _well_formed(key):
        return None
    cache = key_cache.for_engine(db.get_bind().engine)
    return key_cache.lookup(cache, hash_key(key), lambda: (c := identify(db, key)) and _detached(c))


def authenticate(db: Session, key: str) -> Project | None:
    """The key's project, or None (see `identify`)."""
    caller = identify(db, key)
    return None if caller is None else caller.project


def revoke_api_key(db: Session, project_id: str, key_id: str) -> ApiKey | None:
    """Revoke one of the project's keys (idempotent); None if the project has no such key."""
    row = db.get(ApiKey, key_id)
    if row is None or row.project_id != project_id:
        return None
    if row.revoked_at is None:
        row.revoked_at = datetime.now(UTC)
        db.flush()
        key_cache.revoked(db)  # every API process forgets its keys when this commits
    return row


def get_or_create_project(db: Session, name: str) -> tuple[Project, bool]:
    project = db.scalar(select(Project).where(Project.name == name))
    if project is not None:
        return project, False
    project = Project(name=name)
    db.add(project)
    db.flush()
    return project, True
