"""API keys: stored only as a keyed hash, compared in constant time, revocable, rate limited per key
with `Retry-After` (one key's flood never slows another key)."""

from __future__ import annotations

import ast
import hashlib
import hmac
import inspect
import json
import time

import pytest
import security_support
from sqlalchemy import text

from core import security
from core.config import settings


def test_the_stored_row_never_contains_the_key(db):
    project, _ = security.get_or_create_project(db, f"keys-{time.time_ns()}")
    key = security.create_api_key(db, project)
    db.commit()
    secret = key.removeprefix(security.KEY_PREFIX)
    # Every column of every row, as PostgreSQL holds it.
    rows = db.execute(text("SELECT row_to_json(k)::text FROM api_key k WHERE project_id = :p"),
                      {"p": project.id}).scalars().all()
    assert len(rows) == 1
    stored = json.loads(rows[0])
    assert key not in rows[0] and secret not in rows[0] and secret[8:] not in rows[0]
    assert stored["prefix"] == key[:12] and len(stored["prefix"]) < len(key) // 3
    # A keyed hash (HMAC with the deployment secret), not a bare digest anyone could precompute.
    assert stored["hash"] == hmac.new(settings.SECRET_KEY.encode(), key.encode(), hashlib.sha256).hexdigest()
    assert stored["hash"] != hashlib.sha256(key.encode()).hexdigest()
    assert security.authenticate(db, key).id == project.id


def test_keys_are_compared_in_constant_time(db, monkeypatch):
    """The code path: identify() (behind authenticate()) compares with hmac.compare_digest and never with ==."""
    tree = ast.parse(inspect.getsource(security.identify))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert any(c.func.attr == "compare_digest" and getattr(c.func.value, "id", "") == "hmac" for c in calls)
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    hash_compares = [n for n in compares if "hash" in ast.unparse(n) or "digest" in ast.unparse(n)]
    assert hash_compares == [], [ast.unparse(n) for n in hash_compares]
    # And at run time: every candidate row goes through compare_digest.
    seen = []
    real = hmac.compare_digest
    monkeypatch.setattr(security.hmac, "compare_digest", lambda a, b: seen.append((a, b)) or real(a, b))
    project, _ = security.get_or_create_project(db, f"ct-{time.time_ns()}")
    key = security.create_api_key(db, project)
    db.commit()
    assert security.authenticate(db, key[:-2] + ("xy" if key[-2:] != "xy" else "zz")) is None
    assert security.authenticate(db, key).id == project.id
    assert len(seen) == 2 and all(len(a) == len(b) == 64 for a, b in seen)


def test_keys_are_long_random_and_distinct(db):
    project, _ = security.get_or_create_project(db, f"rand-{time.time_ns()}")
    keys = {security.create_api_key(db, project) for _ in range(50)}
    db.commit()
    assert len(keys) == 50
    assert all(k.startswith("keel_") and len(k) >= 5 + 43 for k in keys)  # >= 256 bits after the prefix


@pytest.fixture
def rate_limit(monkeypatch):
    """Three requests a minute per key, counted in Redis under a prefix of this test's own."""
    from api import ratelimit

    monkeypatch.setattr(settings, "RATE_LIMIT_PER_MINUTE", 3)
    monkeypatch.setattr(ratelimit, "rate_limiter",
                        ratelimit.RateLimiter(settings.REDIS_URL, prefix=f"keel:test:{time.time_ns()}"))
    return 3


ROUTES = ["/v1/files", "/v1/jobs", "/v1/models", "/v1/jobs/job-x", "/v1/files/file-x/preview"]


@pytest.mark.parametrize("path", ROUTES)
def test_a_flood_from_one_key_is_429_with_retry_after(client, auth, other_auth, rate_limit, path):
    for _ in range(rate_limit):
        assert client.get(path, headers=auth).status_code != 429
    r = client.get(path, headers=auth)
    body = security_support.api_files().assert_problem(r, 429, "rate_limited")
    retry_after = int(r.headers["Retry-After"])
    assert 1 <= retry_after <= 60, retry_after
    assert (r.headers["X-RateLimit-Limit"], r.headers["X-RateLimit-Remaining"]) == (str(rate_limit), "0")
    assert "Too many requests" in body["detail"]
    # Another key (another project here) is unaffected, and so is a second key of the same project.
    assert client.get(path, headers=other_auth).status_code != 429
    # A bad key is refused as such, before any bucket is touched.
    assert client.get(path, headers={"Authorization": "Bearer keel_nope"}).status_code == 401


def test_each_key_has_its_own_bucket_even_within_a_project(client, db, project_key, rate_limit):
    project = db.get(security.Project, project_key[0])
    second = security.create_api_key(db, project)
    db.commit()
    first = {"Authorization": f"Bearer {project_key[1]}"}
    for _ in range(rate_limit):
        client.get("/v1/jobs", headers=first)
    assert client.get("/v1/jobs", headers=first).status_code == 429
    assert client.get("/v1/jobs", headers={"Authorization": f"Bearer {second}"}).status_code == 200


def test_the_budget_comes_back_after_retry_after(client, auth, monkeypatch):
    from api import ratelimit

    monkeypatch.setattr(settings, "RATE_LIMIT_PER_MINUTE", 10)
    # The same limiter with a 2-second window instead of a minute, so the test waits seconds.
    monkeypatch.setattr(ratelimit, "rate_limiter", ratelimit.RateLimiter(
        settings.REDIS_URL, prefix=f"keel:test:{time.time_ns()}", window_s=2))
    codes = []
    while len(codes) < 30 and 429 not in codes:
        codes.append(client.get("/v1/models", headers=auth).status_code)
    assert codes[-1] == 429 and set(codes[:-1]) == {200} and len(codes) == 11
    r = client.get("/v1/models", headers=auth)
    assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 3
    time.sleep(int(r.headers["Retry-After"]) + 0.2)
    assert client.get("/v1/models", headers=auth).status_code == 200
