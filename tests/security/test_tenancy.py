"""Another project's resources do not exist for you: every route with an id path parameter (taken from
the app's route list, not a hand-made one) answers project B's key with the same 404 problem as for
an unknown id, for each of project A's file, job, checkpoint and model; lists never show them; a job
of B cannot reference them; and nothing of A changes."""

from __future__ import annotations

import pytest
import security_support
from security_support import is_public, iter_routes, path_params

from api.main import app as live_app


def _tenant_route(route) -> bool:
    # Admin-only routes (API keys, ...) have tenancy tests of their own (tests/api/test_keys_routes.py).
    return not is_public(route) and not route.admin


ID_ROUTES = [r for r in iter_routes(live_app) if r.method != "*" and _tenant_route(r) and path_params(r.path)]
LIST_ROUTES = [r for r in iter_routes(live_app)
               if r.method == "GET" and r.path.startswith("/v1/") and not path_params(r.path) and _tenant_route(r)]


@pytest.fixture
def world(client, keel_home, monkeypatch):
    w = security_support.build_world(client, keel_home, monkeypatch, prefix="tenant-a")
    yield w
    security_support.retire_jobs(w.project_id)


def fill(path: str, ids: dict[str, str]) -> str:
    for name in path_params(path):
        path = path.replace("{" + name + "}", ids[name])
    return path


def test_every_id_parameter_is_a_known_resource():
    """A new kind of id in a path must be added to World.ids (and so to these tests)."""
    names = {name for r in ID_ROUTES for name in path_params(r.path)}
    assert names == {"file_id", "job_id", "checkpoint_id", "model_id", "webhook_id", "trainer_id", "operation_id"}
    assert len(ID_ROUTES) >= 12


@pytest.mark.parametrize("route", ID_ROUTES, ids=[f"{r.method} {r.path}" for r in ID_ROUTES])
def test_another_projects_ids_are_404_everywhere(client, world, other_auth, route):
    for ids in ({**world.ids, "job_id": world.queued_job_id}, world.ids, {**world.ids, "file_id": world.spare_file_id}):
        url = fill(route.path, ids)
        kwargs = {"json": {}} if route.method == "POST" and not url.endswith("/cancel") else {}
        theirs = client.request(route.method, url, headers=other_auth, **kwargs)
        missing = client.request(route.method, fill(route.path, {k: v[:-4] + "zzzz" for k, v in ids.items()}),
                                 headers=other_auth, **kwargs)
        param = path_params(route.path)[0]
        body = security_support.api_files().assert_problem(theirs, 404, "not_found", param)
        # Exactly the answer for an id that does not exist: nothing tells the two apart.
        other = missing.json()
        assert (body["type"], body["title"], body["code"], body["param"]) == \
            (other["type"], other["title"], other["code"], other["param"])
        assert body["detail"].replace(ids[param], "ID") == other["detail"].replace(
            ids[param][:-4] + "zzzz", "ID")
        assert set(theirs.headers) - {"content-length", "x-request-id"} == \
            set(missing.headers) - {"content-length", "x-request-id"}
    # The owner still sees everything as it was: the other key changed nothing.
    assert client.get(f"/v1/files/{world.file_id}", headers=world.headers).status_code == 200
    assert client.get(f"/v1/files/{world.spare_file_id}", headers=world.headers).status_code == 200
    assert client.get(f"/v1/jobs/{world.queued_job_id}", headers=world.headers).json()["status"] == "queued"


@pytest.mark.parametrize("route", ID_ROUTES, ids=[f"{r.method} {r.path}" for r in ID_ROUTES])
def test_the_owner_reaches_the_same_urls(client, world, route):
    """The control for the test above: these ids are real (GETs only; the writes are checked there)."""
    if route.method != "GET":
        pytest.skip("writes are checked by their own tests")
    r = client.get(fill(route.path, world.ids), headers=world.headers)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("route", LIST_ROUTES, ids=[r.path for r in LIST_ROUTES])
def test_lists_never_show_another_projects_resources(client, world, other_auth, route):
    mine = client.get(route.path, headers=world.headers).json()["data"]
    assert mine, f"{route.path} lists nothing for its owner"
    assert client.get(route.path, headers=other_auth).json()["data"] == []


@pytest.mark.parametrize(("field", "value_of", "param"), [
    ("training_file", lambda w: w.file_id, "training_file"),
    ("validation_file", lambda w: w.file_id, "validation_file"),
    ("model", lambda w: w.model_id, "model"),
    ("from_checkpoint", lambda w: w.checkpoint_id, "from_checkpoint"),
])
def test_a_job_cannot_use_another_projects_resources(client, db, world, other_auth, monkeypatch,
                                                     field, value_of, param):
    from workers import dispatch

    sent = []
    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: sent.append(job_id))
    jobs = security_support.api_jobs()
    own_file = jobs.make_file(db, jobs.project_of(db, other_auth), "preference")
    body = {**jobs.rm_body({"preference": own_file}), field: value_of(world)}
    r = jobs.create(client, other_auth, body)
    security_support.api_files().assert_problem(r, 404, "not_found", param)
    assert sent == []
