"""Issue 27, item 11: failed authentications are limited per client address before the key is looked
up (`KEEL_AUTH_FAILURES_PER_MINUTE`), and a project's active keys are capped (`KEEL_MAX_KEYS_PER_PROJECT`)."""

from __future__ import annotations

import secrets

import pytest

from api import ratelimit
from core.config import settings


@pytest.fixture
def admin(database) -> dict[str, str]:
    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project

    with session_scope() as db:
        project, _ = get_or_create_project(db, f"limits-{secrets.token_hex(4)}")
        return {"Authorization": f"Bearer {create_api_key(db, project, admin=True)}"}


def test_invalid_keys_are_limited_per_client_address(client, auth, monkeypatch):
    # A budget of its own in the real Redis, under a prefix no other test session shares.
    monkeypatch.setattr(ratelimit, "auth_failures",
                        ratelimit.RateLimiter(settings.REDIS_URL, prefix=f"keel:authfail:{secrets.token_hex(4)}"))
    monkeypatch.setattr(settings, "AUTH_FAILURES_PER_MINUTE", 5)
    assert client.get("/v1/jobs", headers=auth).status_code == 200  # a valid key is no failure
    bad = {"Authorization": "Bearer keel_" + secrets.token_urlsafe(32)}
    assert [client.get("/v1/jobs", headers=bad).status_code for _ in range(5)] == [401] * 5
    r = client.get("/v1/jobs", headers=bad)
    assert r.status_code == 429 and r.json()["code"] == "too_many_auth_failures", r.text
    assert int(r.headers["Retry-After"]) >= 1
    assert client.get("/v1/keys", headers={"Authorization": "Bearer nonsense"}).status_code == 429


def test_active_keys_per_project_are_capped(client, admin, monkeypatch):
    monkeypatch.setattr(settings, "MAX_KEYS_PER_PROJECT", 3)  # the admin key is one of them
    made = [client.post("/v1/keys", json={}, headers=admin) for _ in range(2)]
    assert [r.status_code for r in made] == [201, 201], made[-1].text
    r = client.post("/v1/keys", json={"admin": True}, headers=admin)
    assert r.status_code == 409 and r.json()["code"] == "too_many_keys", r.text
    assert client.delete(f"/v1/keys/{made[0].json()['id']}", headers=admin).status_code == 200
    assert client.post("/v1/keys", json={}, headers=admin).status_code == 201  # revoked keys do not count


@pytest.mark.parametrize("trusted", [True, False])
def test_the_client_address_behind_a_trusted_proxy(app, monkeypatch, trusted):
    """On a real uvicorn with the launcher's settings: `X-Forwarded-For` names the client only when the
    peer is in KEEL_FORWARDED_ALLOW_IPS (else every request counts against the peer)."""
    import httpx
    from serving import serve

    from keel_cli.server import uvicorn_options

    monkeypatch.setattr(ratelimit, "auth_failures",
                        ratelimit.RateLimiter(settings.REDIS_URL, prefix=f"keel:authfail:{secrets.token_hex(4)}"))
    monkeypatch.setattr(settings, "AUTH_FAILURES_PER_MINUTE", 2)
    monkeypatch.setattr(settings, "FORWARDED_ALLOW_IPS", "127.0.0.1" if trusted else "192.0.2.1")
    bad = {"Authorization": "Bearer keel_" + secrets.token_urlsafe(32)}
    with serve(app, lifespan="off", **uvicorn_options(settings)) as base:
        def status(client_ip: str) -> int:
            return httpx.get(f"{base}/v1/jobs", headers={**bad, "X-Forwarded-For": client_ip}).status_code

        assert [status("203.0.113.1") for _ in range(3)] == [401, 401, 429]
        assert status("203.0.113.2") == (401 if trusted else 429)
