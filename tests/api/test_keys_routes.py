"""`/v1/keys` for admin keys: the secret is shown once, a revoked key is a 401 on its very next request,
a project key is a 403, another project's keys do not exist, and every job records its creator key."""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy import select, text, update

from core.db import session_scope
from core.models import ApiKey, Job, Project
from core.security import create_api_key, get_or_create_project
from tests.api import job_requests


def _key(project_id: str, *, admin: bool) -> str:
    with session_scope() as db:
        return create_api_key(db, db.get(Project, project_id), admin=admin)


@pytest.fixture
def admin(project_key) -> dict[str, str]:
    return {"Authorization": f"Bearer {_key(project_key[0], admin=True)}"}


def test_an_admin_creates_lists_and_revokes_keys(client, admin, auth, project_key):
    r = client.post("/v1/keys", json={"name": "ci"}, headers=admin)
    assert r.status_code == 201, r.text
    created = r.json()
    secret = created["key"]
    assert secret.startswith("keel_") and created["prefix"] == secret[:12]
    assert (created["object"], created["name"], created["admin"], created["project"], created["revoked_at"]) == \
        ("api_key", "ci", False, project_key[0], None)
    new = {"Authorization": f"Bearer {secret}"}
    assert client.get("/v1/jobs", headers=new).status_code == 200

    listed = client.get("/v1/keys", headers=admin).json()
    assert created["id"] in [k["id"] for k in listed["data"]] and len(listed["data"]) == 3  # + admin, + auth
    assert secret not in r.request.url.path and secret not in str(listed) and all("key" not in k for k in listed["data"])

    revoked = client.delete(f"/v1/keys/{created['id']}", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None and "key" not in revoked.json()
    # The very next request with it is refused: nothing serves a revoked key from a cache.
    r = client.get("/v1/jobs", headers=new)
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    assert client.delete(f"/v1/keys/{created['id']}", headers=admin).json()["revoked_at"] == revoked.json()["revoked_at"]
    assert client.get("/v1/jobs", headers=auth).status_code == 200  # the other keys are untouched


def test_a_revoked_key_is_refused_on_a_connection_it_already_used(live_server, admin, project_key):
    """The same keep-alive connection, a request before and after the revocation: 200 then 401."""
    import httpx

    victim = _key(project_key[0], admin=False)
    with httpx.Client(base_url=live_server, headers={"Authorization": f"Bearer {victim}"}) as http:
        assert http.get("/v1/models").status_code == 200
        key_id = next(k["id"] for k in httpx.get(f"{live_server}/v1/keys", headers=admin).json()["data"]
                      if victim.startswith(k["prefix"]) and not k["admin"])
        assert httpx.delete(f"{live_server}/v1/keys/{key_id}", headers=admin).status_code == 200
        assert http.get("/v1/models").status_code == 401


def test_a_project_key_gets_403_on_every_key_route(client, auth):
    for method, path, body in [("GET", "/v1/keys", None), ("POST", "/v1/keys", {"admin": True}),
                               ("DELETE", "/v1/keys/key-01jb8x6v0c3n7t9r2m4k5q8w1z", None)]:
        r = client.request(method, path, headers=auth, json=body)
        assert r.status_code == 403, (method, r.text)
        assert r.headers["content-type"].startswith("application/problem+json") and r.json()["code"] == "forbidden"


def test_an_admin_may_mint_admins_and_the_secret_is_never_stored(client, admin, db):
    r = client.post("/v1/keys", json={"admin": True}, headers=admin)
    assert r.status_code == 201 and r.json()["admin"] is True
    minted = {"Authorization": f"Bearer {r.json()['key']}"}
    assert client.get("/v1/keys", headers=minted).status_code == 200
    row = db.execute(text("SELECT row_to_json(k)::text FROM api_key k WHERE id = :i"), {"i": r.json()["id"]}).scalar()
    assert r.json()["key"] not in row and r.json()["key"][12:] not in row


def test_bad_bodies_are_422(client, admin):
    for body, param in [({"admin": "yes"}, "admin"), ({"name": ""}, "name"), ({"name": "x" * 101}, "name"),
                        ({"scope": "all"}, "scope")]:
        r = client.post("/v1/keys", json=body, headers=admin)
        assert r.status_code == 422 and r.json()["param"] == param, r.text


def test_another_projects_keys_do_not_exist_for_an_admin(client, admin):
    with session_scope() as db:
        other, _ = get_or_create_project(db, f"other-{secrets.token_hex(4)}")
        other_key = create_api_key(db, other)
        other_id = db.scalar(select(ApiKey.id).where(ApiKey.project_id == other.id))
    r = client.delete(f"/v1/keys/{other_id}", headers=admin)
    assert r.status_code == 404 and r.json()["param"] == "key_id"
    assert other_id not in [k["id"] for k in client.get("/v1/keys", headers=admin).json()["data"]]
    assert client.get("/v1/models", headers={"Authorization": f"Bearer {other_key}"}).status_code == 200


def test_every_job_records_the_key_that_created_it(client, db, project_key, monkeypatch):
    from workers import dispatch

    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: True)
    body = job_requests.rm_body({"preference": job_requests.make_file(db, project_key[0], "preference")})
    second = _key(project_key[0], admin=False)
    made = {}
    for key in (project_key[1], second):
        r = job_requests.create(client, {"Authorization": f"Bearer {key}"}, body)
        assert r.status_code == 201, r.text
        made[key] = r.json()
    try:
        for key, job in made.items():
            key_id = db.scalar(select(ApiKey.id).where(ApiKey.prefix == key[:12]))
            assert job["created_by"] == key_id
            assert db.get(Job, job["id"]).created_by == key_id
            r = client.get(f"/v1/jobs/{job['id']}", headers={"Authorization": f"Bearer {project_key[1]}"})
            assert r.json()["created_by"] == key_id
        assert made[project_key[1]]["created_by"] != made[second]["created_by"]
    finally:
        db.execute(update(Job).where(Job.project_id == project_key[0]).values(status="cancelled"))
        db.commit()
