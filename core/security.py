"""API keys: shown once, stored as an HMAC, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.config import settings
from core.models import ApiKey, Project

KEY_PREFIX = "keel_"
_LOOKUP_LEN = 12  # "keel_" + 7 random chars: enough to find the row, useless to an attacker


def hash_key(key: str) -> str:
    return hmac.new(settings.SECRET_KEY.encode(), key.encode(), hashlib.sha256).hexdigest()


def create_api_key(db: Session, project: Project) -> str:
    """Create a key for `project` and return it; only its hash is stored."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    db.add(ApiKey(project_id=project.id, prefix=key[:_LOOKUP_LEN], hash=hash_key(key)))
    db.flush()
    return key


def authenticate(db: Session, key: str) -> Project | None:
    """The key's project, or None. Every candidate is compared in constant time."""
    if not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    digest = hash_key(key)
    rows = db.execute(select(ApiKey.hash, Project).join(Project, Project.id == ApiKey.project_id)
                      .where(ApiKey.prefix == key[:_LOOKUP_LEN], ApiKey.revoked_at.is_(None))).all()
    found = None
    for stored, project in rows:  # one query; every candidate compared
        if hmac.compare_digest(stored, digest):
            found = project
    return found


def get_or_create_project(db: Session, name: str) -> tuple[Project, bool]:
    project = db.scalar(select(Project).where(Project.name == name))
    if project is not None:
        return project, False
    project = Project(name=name)
    db.add(project)
    db.flush()
    return project, True
