"""Every route but the probes, the docs and the signed downloads needs a valid key: the app's routes are
enumerated (walking included routers), so a route added tomorrow is covered without editing this file."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import pytest
import security_support
from security_support import SIGNED_PATHS, is_public, is_signed, iter_routes, path_params
from sqlalchemy import update

from api.main import app as live_app
from core.models import ApiKey

ROUTES = [r for r in iter_routes(live_app) if r.method != "*"]
PROTECTED = [r for r in ROUTES if not is_public(r) and not is_signed(r)]


def url_of(path: str) -> str:
    """The route's path with an id-looking value in each parameter."""
    for name in path_params(path):
        path = path.replace("{" + name + "}", f"{name.removesuffix('_id')}-01jb8x6v0c3n7t9r2m4k5q8w1z")
    return path


def assert_unauthorized(r) -> None:
    assert r.status_code == 401, (r.request.method, r.request.url, r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.headers["WWW-Authenticate"] == "Bearer"
    body = r.json()
    assert body["code"] == "unauthorized" and body["status"] == 401 and body["request_id"]


def test_the_route_list_is_the_whole_app():
    """Enumeration sees every operation of the OpenAPI document, plus the routes kept out of it."""
    documented = {(m.upper(), p) for p, item in live_app.openapi()["paths"].items() for m in item}
    enumerated = {(r.method, r.path) for r in ROUTES if r.in_schema}
    assert enumerated == documented
    hidden = {(r.method, r.path) for r in iter_routes(live_app) if not r.in_schema}
    # The Tinker room (/api/v1) stays out of Keel's OpenAPI document: its own client is its contract.
    tinker = {(m, p) for m, p in hidden if p.startswith("/api/v1/")}
    assert len(tinker) >= 20
    assert hidden - tinker == {("GET", "/openapi.json"), ("HEAD", "/openapi.json"), ("GET", "/docs"), ("GET", "/redoc"),
                               ("*", "/docs-assets"), ("GET", "/docs-assets/redoc.standalone.js"), ("GET", "/metrics"),
                               ("GET", "/"), ("GET", "/console/{asset:path}")}
    assert len(PROTECTED) >= 17 and all(r.path.startswith(("/v1/", "/api/v1/")) for r in PROTECTED)
    assert {r.path for r in ROUTES if is_signed(r)} == SIGNED_PATHS  # each still routed


@pytest.mark.parametrize("path", sorted(SIGNED_PATHS))
def test_a_signed_route_is_refused_without_its_signature(client, auth, revoked_key, path):
    """No key opens a signed download in place of its signature (test_tinker_tenancy.py has the links)."""
    for headers in ({}, auth, {"X-API-Key": "tml-" + auth["Authorization"].split()[1]},
                    {"Authorization": f"Bearer {revoked_key}"}):
        r = client.get(url_of(path), headers=headers)
        security_support.api_files().assert_problem(r, 403, "invalid_signature", "signature")


@pytest.fixture
def admin_auth(project_key) -> dict[str, str]:
    from core.db import session_scope
    from core.models import Project
    from core.security import create_api_key

    with session_scope() as db:
        return {"Authorization": f"Bearer {create_api_key(db, db.get(Project, project_key[0]), admin=True)}"}


@pytest.fixture(scope="module")
def revoked_key(database) -> str:
    project_id, key = security_support.new_project_key("revoked")
    from core.db import session_scope

    with session_scope() as db:
        db.execute(update(ApiKey).where(ApiKey.project_id == project_id).values(revoked_at=datetime.now(UTC)))
    return key


BAD_HEADERS = {
    "missing": {},
    "empty bearer": {"Authorization": "Bearer "},
    "not a keel key": {"Authorization": "Bearer sk-" + secrets.token_urlsafe(32)},
    "unknown keel key": {"Authorization": "Bearer keel_" + secrets.token_urlsafe(32)},
    "truncated prefix": {"Authorization": "Bearer keel_"},
    "huge": {"Authorization": "Bearer keel_" + "A" * 10_000},
    "basic scheme": {"Authorization": "Basic " + secrets.token_urlsafe(16)},
    "unknown tinker key": {"X-API-Key": "tml-keel_" + secrets.token_urlsafe(32)},  # the Tinker room's header
    "empty tinker key": {"X-API-Key": "tml-"},
    "key as a query parameter": {},  # sent in ?api_key= below: never read from the URL
}


@pytest.mark.parametrize("route", PROTECTED, ids=[f"{r.method} {r.path}" for r in PROTECTED])
@pytest.mark.parametrize("variant", list(BAD_HEADERS))
def test_every_protected_route_is_401_without_a_valid_key(client, auth, route, variant):
    url = url_of(route.path)
    if variant == "key as a query parameter":
        url += "?api_key=" + auth["Authorization"].split()[1]
    # No body, or an empty JSON object: authentication is checked before the body is validated.
    kwargs = {"json": {}} if route.method == "POST" and route.path == "/v1/jobs" else {}
    assert_unauthorized(client.request(route.method, url, headers=BAD_HEADERS[variant], **kwargs))


@pytest.mark.parametrize("route", PROTECTED, ids=[f"{r.method} {r.path}" for r in PROTECTED])
def test_a_revoked_key_is_401(client, revoked_key, route):
    assert_unauthorized(client.request(route.method, url_of(route.path),
                                       headers={"Authorization": f"Bearer {revoked_key}"}))


@pytest.mark.parametrize("route", PROTECTED, ids=[f"{r.method} {r.path}" for r in PROTECTED])
def test_a_valid_key_gets_past_authentication(client, auth, admin_auth, route):
    """The control: the same requests with a key are never a 401 (a 404 or 422 for the dummy ids);
    the admin routes take an admin key."""
    kwargs = {"json": {}} if route.method == "POST" and route.path == "/v1/jobs" else {}
    headers = admin_auth if route.admin else auth
    r = client.request(route.method, url_of(route.path), headers=headers, **kwargs)
    assert r.status_code not in (401, 403, 500), r.text


def test_the_public_routes_answer_without_a_key(client):
    public = [r for r in ROUTES if is_public(r)]
    assert {r.path for r in public} == {"/healthz", "/readyz", "/docs", "/redoc", "/openapi.json", "/metrics",
                                        "/", "/console/{asset:path}", "/docs-assets/redoc.standalone.js",
                                        "/api/v1/healthz"}
    for route in public:
        r = client.request(route.method, route.path.replace("{asset:path}", "app.js"))
        assert r.status_code in (200, 503), (route, r.status_code)  # readyz: 503 names what is down
    from api.docs import ASSET_FILES, ASSETS_PATH

    assert client.get(f"{ASSETS_PATH}/{ASSET_FILES[0]}").status_code == 200
    # The mount serves its own files only.
    assert client.get(f"{ASSETS_PATH}/../api/main.py").status_code == 404
    assert client.get(f"{ASSETS_PATH}/%2e%2e/%2e%2e/pyproject.toml").status_code == 404
    assert client.get("/console/%2e%2e/%2e%2e/main.py").status_code == 404  # the console's own files only


def test_the_openapi_document_declares_the_key_and_the_401_everywhere():
    doc = live_app.openapi()
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if path in ("/healthz", "/readyz"):
                assert "security" not in op
                continue
            assert op.get("security") == [{"HTTPBearer": []}], (method, path)
            assert "401" in op["responses"] and "429" in op["responses"], (method, path)
