"""The per-process API key cache (`core.key_cache`): a cached key skips the database, and a revoked
key stops working in every process as soon as the revocation commits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import update

from core import key_cache, security
from core.db import get_engine
from core.models import ApiKey

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache():
    """This process's cache of the test database, subscribed."""
    cache = key_cache.for_engine(get_engine())
    deadline = time.monotonic() + 10
    while not cache.listening and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cache.listening
    return cache


@pytest.fixture
def lookups(monkeypatch) -> list[str]:
    """Every key looked up in the database."""
    seen: list[str] = []
    real = security.identify
    monkeypatch.setattr(security, "identify", lambda db, key: seen.append(key) or real(db, key))
    return seen


@pytest.fixture
def admin_headers(project_key) -> dict[str, str]:
    from core.db import session_scope
    from core.models import Project

    with session_scope() as db:
        return {"Authorization": f"Bearer {security.create_api_key(db, db.get(Project, project_key[0]), admin=True)}"}


def _key_id(db, key: str) -> str:
    return next(row.id for row in db.query(ApiKey).filter(ApiKey.prefix == key[:12]))


def _refused_within(client, headers, seconds: float) -> float | None:
    """Seconds until the key is a 401, or None if it still works after `seconds`."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if client.get("/v1/models", headers=headers).status_code == 401:
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def test_a_cached_key_is_not_looked_up_again(client, project_key, cache, lookups):
    headers = {"Authorization": f"Bearer {project_key[1]}"}
    for _ in range(5):
        assert client.get("/v1/models", headers=headers).status_code == 200
    assert lookups == [project_key[1]]


def test_a_key_revoked_by_another_process_is_refused_when_the_revocation_commits(client, db, project_key,
                                                                                   cache, lookups):
    headers = {"Authorization": f"Bearer {project_key[1]}"}
    assert client.get("/v1/models", headers=headers).status_code == 200
    assert client.get("/v1/models", headers=headers).status_code == 200
    assert len(lookups) == 1  # the second answer came from the cache
    key_id = _key_id(db, project_key[1])
    revoke = ("from core.db import session_scope\nfrom core.security import revoke_api_key\n"
              f"with session_scope() as db:\n    assert revoke_api_key(db, {project_key[0]!r}, {key_id!r})\n")
    subprocess.run([sys.executable, "-c", revoke], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                   check=True, timeout=60)
    waited = _refused_within(client, headers, 2.0)
    assert waited is not None, "the revoked key still worked 2 s after the revocation committed"
    assert len(lookups) == 2  # the cache was emptied: the key was read again, and found revoked


def test_a_key_revoked_here_is_refused_by_the_very_next_request(client, admin_headers, project_key, cache):
    headers = {"Authorization": f"Bearer {project_key[1]}"}
    assert client.get("/v1/models", headers=headers).status_code == 200
    key_id = next(k["id"] for k in client.get("/v1/keys", headers=admin_headers).json()["data"]
                  if project_key[1].startswith(k["prefix"]) and not k["admin"])
    assert client.delete(f"/v1/keys/{key_id}", headers=admin_headers).status_code == 200
    assert client.get("/v1/models", headers=headers).status_code == 401


def test_a_key_revoked_behind_the_apis_back_works_at_most_the_ttl(client, db, project_key, cache, monkeypatch):
    """Writing `revoked_at` directly sends no NOTIFY: the entry's lifetime bounds it."""
    monkeypatch.setattr(cache, "ttl_s", 0.5)
    headers = {"Authorization": f"Bearer {project_key[1]}"}
    assert client.get("/v1/models", headers=headers).status_code == 200
    db.execute(update(ApiKey).where(ApiKey.id == _key_id(db, project_key[1])).values(revoked_at=ApiKey.created_at))
    db.commit()
    waited = _refused_within(client, headers, 3.0)
    assert waited is not None and waited <= 0.5 + 0.5


def test_the_cache_answers_only_while_its_listener_is_subscribed(cache):
    entry = object()
    cache.put("digest-x", entry, cache.generation())
    assert cache.get("digest-x") is entry
    cache.stop()
    try:
        assert cache.get("digest-x") is None  # emptied, and nothing is kept until it listens again
        cache.put("digest-x", entry, cache.generation())
        assert cache.get("digest-x") is None
    finally:
        cache.start()
    deadline = time.monotonic() + 10
    while not cache.listening and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cache.listening


def test_an_answer_read_before_an_invalidation_is_not_kept(cache):
    """A lookup that read the database, then saw the cache emptied, does not store what it read."""
    entry = object()
    generation = cache.generation()
    cache.clear()  # a revocation arrived while the lookup was reading
    cache.put("digest-y", entry, generation)
    assert cache.get("digest-y") is None
