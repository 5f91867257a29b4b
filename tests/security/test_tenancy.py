"""Another project's resources do not exist for you: every route with an id path parameter (taken from
the app's route list, not a hand-made one) answers project B's key with the same 404 problem as for
an unknown id, for each of project A's file, job, checkpoint and model, and in the Tinker room
(`/api/v1`, B's key sent as its client sends it) A's session, training run, sampling session and
checkpoint; lists never show them; a job of B cannot reference them; and nothing of A changes."""

from __future__ import annotations

import re
import secrets
import shutil
from pathlib import Path

import pytest
import security_support
from security_support import is_public, is_signed, iter_routes, path_params, tinker_headers

from api.main import app as live_app
from core.config import settings


def _tenant_route(route) -> bool:
    # Admin-only routes (API keys, ...) have tenancy tests of their own (tests/api/test_keys_routes.py);
    # a signed download takes no key: test_tinker_tenancy.py checks its signature.
    return not is_public(route) and not route.admin and not is_signed(route)


ID_ROUTES = [r for r in iter_routes(live_app) if r.method != "*" and _tenant_route(r) and path_params(r.path)]
LIST_ROUTES = [r for r in iter_routes(live_app)
               if r.method == "GET" and r.path.startswith(("/v1/", "/api/v1/")) and not path_params(r.path)
               and _tenant_route(r)]
LIST_ITEMS = {"/api/v1/training_runs": "training_runs", "/api/v1/get_server_capabilities": "supported_models"}
"""The Tinker room's lists keep their items under Tinker's names; the others under `data`."""


@pytest.fixture
def world(client, keel_home, monkeypatch):
    w = security_support.build_world(client, keel_home, monkeypatch, prefix="tenant-a")
    yield w
    security_support.retire_jobs(w.project_id)


def fill(path: str, ids: dict[str, str]) -> str:
    """The route's path with `ids` in its parameters (`{name}`, or `{name:path}`)."""
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: ids[m.group(1)], path)


def headers_for(path: str, auth: dict[str, str]) -> dict[str, str]:
    return tinker_headers(auth) if path.startswith("/api/v1/") else auth


def expected_param(path: str) -> str:
    """The field a 404 names: the path's first parameter. The Tinker room names its client's fields
    (`sampling_session_id`, `training_run_id`), and finds a run's checkpoint as one `tinker://` path,
    so a wrong run there is a `checkpoint_id` not found."""
    names = path_params(path)
    if not path.startswith("/api/v1/"):
        return names[0]
    if "checkpoint_id" in names:
        return "checkpoint_id"
    return {"sampler_id": "sampling_session_id", "run_id": "training_run_id"}.get(names[0], names[0])


def masked(text: str, values: list[str]) -> str:
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, "ID")
    return text


def test_every_id_parameter_is_a_known_resource():
    """A new kind of id in a path must be added to World.ids or World.tinker_ids (and so to these tests)."""
    names = {name for r in ID_ROUTES if not r.path.startswith("/api/v1/") for name in path_params(r.path)}
    assert names == {"file_id", "job_id", "checkpoint_id", "model_id", "webhook_id", "trainer_id", "operation_id",
                     "trajectory_id"}
    tinker = {name for r in ID_ROUTES if r.path.startswith("/api/v1/") for name in path_params(r.path)}
    assert tinker == {"session_id", "run_id", "sampler_id", "checkpoint_id"}
    assert len(ID_ROUTES) >= 19


@pytest.mark.parametrize("route", ID_ROUTES, ids=[f"{r.method} {r.path}" for r in ID_ROUTES])
def test_another_projects_ids_are_404_everywhere(client, world, other_auth, route):
    base = world.ids_for(route.path)
    headers = headers_for(route.path, other_auth)
    for ids in ({**base, "job_id": world.queued_job_id}, base, {**base, "file_id": world.spare_file_id}):
        url = fill(route.path, ids)
        body = {"reward": 0.0} if url.endswith("/reward") else {}  # a valid body: the id alone is refused
        kwargs = {"json": body} if route.method == "POST" and not url.endswith("/cancel") else {}
        unknown = {k: v[:-4] + "zzzz" for k, v in ids.items()}
        theirs = client.request(route.method, url, headers=headers, **kwargs)
        missing = client.request(route.method, fill(route.path, unknown), headers=headers, **kwargs)
        body = security_support.api_files().assert_problem(theirs, 404, "not_found", expected_param(route.path))
        # Exactly the answer for an id that does not exist: nothing tells the two apart.
        other = missing.json()
        assert (body["type"], body["title"], body["code"], body["param"]) == \
            (other["type"], other["title"], other["code"], other["param"])
        names = path_params(route.path)
        assert masked(body["detail"], [ids[n] for n in names]) == masked(other["detail"], [unknown[n] for n in names])
        assert set(theirs.headers) - {"content-length", "x-request-id"} == \
            set(missing.headers) - {"content-length", "x-request-id"}
    # The owner still sees everything as it was: the other key changed nothing.
    assert client.get(f"/v1/files/{world.file_id}", headers=world.headers).status_code == 200
    assert client.get(f"/v1/files/{world.spare_file_id}", headers=world.headers).status_code == 200
    assert client.get(f"/v1/jobs/{world.queued_job_id}", headers=world.headers).json()["status"] == "queued"
    r = client.get(f"/api/v1/training_runs/{world.run_id}/checkpoints", headers=world.tinker_headers)
    assert [c["checkpoint_id"] for c in r.json()["checkpoints"]] == [world.tinker_checkpoint]
    r = client.post("/api/v1/session_heartbeat", headers=world.tinker_headers,
                    json={"session_id": world.tinker_session_id})
    assert r.status_code == 200, r.text  # not finished


@pytest.mark.parametrize("route", ID_ROUTES, ids=[f"{r.method} {r.path}" for r in ID_ROUTES])
def test_the_owner_reaches_the_same_urls(client, world, route):
    """The control for the test above: these ids are real (GETs only; the writes are checked there)."""
    if route.method != "GET":
        pytest.skip("writes are checked by their own tests")
    r = client.get(fill(route.path, world.ids_for(route.path)), headers=headers_for(route.path, world.headers))
    assert r.status_code == 200, r.text


def _shared(route, item: dict) -> bool:
    """A base model under the deployment's model roots, listed to every project by design: in
    `/v1/models` (owned by `keel`) and the Tinker room's capabilities (by its directory)."""
    name = {"/v1/models": lambda: item["id"] if item["owned_by"] == "keel" else "",
            "/api/v1/get_server_capabilities": lambda: item["model_name"]}.get(route.path, lambda: "")()
    return any(name.startswith(root.rstrip("/") + "/") for root in settings.model_roots)


@pytest.fixture
def shared_base_model():
    """A base model directory under the first model root, for this test only."""
    path = Path(settings.model_roots[0]) / f"0security-shared-{secrets.token_hex(4)}"  # listed before any other
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    yield str(path)
    shutil.rmtree(path)


@pytest.mark.parametrize("route", LIST_ROUTES, ids=[r.path for r in LIST_ROUTES])
def test_lists_never_show_another_projects_resources(client, world, other_auth, shared_base_model, route):
    key = LIST_ITEMS.get(route.path, "data")
    mine = client.get(route.path, headers=headers_for(route.path, world.headers)).json()[key]
    theirs = client.get(route.path, headers=headers_for(route.path, other_auth)).json()[key]
    own = [item for item in mine if not _shared(route, item)]
    assert own, f"{route.path} lists nothing of its owner's"
    assert [item for item in theirs if not _shared(route, item)] == []
    # The shared base models are the same list for every project.
    assert [item for item in mine if _shared(route, item)] == [item for item in theirs if _shared(route, item)]
    if route.path == "/v1/models":
        assert {item["owned_by"] for item in own} == {world.project_id}
        assert shared_base_model in [item["id"] for item in mine]
    if route.path == "/api/v1/get_server_capabilities":
        assert shared_base_model in [item["model_name"] for item in mine]


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
