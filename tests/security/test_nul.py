"""Issue 27, item 8: NUL in any string input is refused before it reaches the database (PostgreSQL
answered 500; SQLite stored it), in bodies (422 at the field), upload metadata, path ids (404) and
query strings (422 at the parameter)."""

from __future__ import annotations

import json
import secrets

import pytest
from security_support import api_files, api_jobs

from core.config import settings


@pytest.fixture(params=["postgresql", "sqlite"])
def api(request, tmp_path, monkeypatch):
    """(client, headers, project id, database URL) on the session's PostgreSQL or a fresh SQLite."""
    from fastapi.testclient import TestClient

    from core.db import get_engine, session_scope
    from core.security import create_api_key, get_or_create_project

    if request.param == "sqlite":
        from api.main import create_app
        from core import migrate

        url = f"sqlite:///{tmp_path / 'keel.db'}"
        monkeypatch.setattr(settings, "DATABASE_URL", url)
        get_engine.cache_clear()  # the default engine is cached by URL `None`
        request.addfinalizer(get_engine.cache_clear)
        migrate.upgrade(url)
        client = TestClient(create_app()).__enter__()
        request.addfinalizer(lambda: client.__exit__(None, None, None))
    else:
        client = request.getfixturevalue("client")
        url = request.getfixturevalue("database")
    with session_scope(url) as db:
        project, _ = get_or_create_project(db, f"nul-{secrets.token_hex(4)}")
        headers = {"Authorization": f"Bearer {create_api_key(db, project)}"}
        project_id = project.id
    return client, headers, project_id, url


def test_nul_in_body_strings_is_a_422_at_the_field(api):
    from core.db import session_scope

    client, headers, project_id, url = api
    with session_scope(url) as db:
        files = {"preference": api_jobs().make_file(db, project_id, "preference")}
    body = api_jobs().rm_body(files)
    body["metadata"] = {"team": "a\x00b"}
    api_files().assert_problem(client.post("/v1/jobs", json=body, headers=headers), 422, "invalid_request",
                               "metadata")
    body["metadata"] = {"te\x00am": "x"}  # keys too
    api_files().assert_problem(client.post("/v1/jobs", json=body, headers=headers), 422, "invalid_request",
                               "metadata")
    r = client.post("/v1/webhooks", json={"url": "https://8.8.8.8/\x00"}, headers=headers)
    api_files().assert_problem(r, 422, "invalid_request", "url")
    r = client.post("/v1/fine_tuning/jobs", json={"model": "org/name", "training_file": files["preference"],
                                                  "metadata": {"k": "\x00"}}, headers=headers)
    assert r.status_code == 400 and r.json()["param"] == "metadata", r.text  # (OpenAI's status for a 422)


def test_nul_in_upload_metadata_path_ids_and_cursors(api):
    client, headers, _, _ = api
    support = api_files()
    r = support.upload(client, headers, support.jsonl_bytes([{"prompt": "p", "completion": "c"}]), purpose="sft",
                       filename="a.jsonl", metadata=json.dumps({"k": "v\x00"}))
    support.assert_problem(r, 422, "invalid_request", "metadata")
    support.assert_problem(client.get("/v1/jobs/job-%00x", headers=headers), 404, "not_found")
    support.assert_problem(client.get("/v1/files/%00", headers=headers), 404, "not_found")
    support.assert_problem(client.get("/v1/jobs?after=job-%00", headers=headers), 422, "invalid_request", "after")
    assert client.get("/v1/jobs?after=", headers=headers).status_code in (200, 422)  # no NUL: the route decides


TINKER_BODIES = [  # (route, body, the field named): ids, names, tags and metadata the client sends
    ("/api/v1/create_session", {"display_name": "a\x00b"}, "display_name"),
    ("/api/v1/create_session", {"tags": ["a\x00b"]}, "tags"),
    ("/api/v1/create_session", {"user_metadata": {"k\x00": "v"}}, "user_metadata"),
    ("/api/v1/session_heartbeat", {"session_id": "ses-\x00"}, "session_id"),
    ("/api/v1/get_info", {"model_id": "m\x00"}, "model_id"),
    ("/api/v1/save_weights", {"model_id": "m", "seq_id": 1, "path": "a\x00"}, "path"),
    ("/api/v1/weights_info", {"tinker_path": "tinker://a\x00/weights/b"}, "tinker_path"),
    ("/api/v1/retrieve_future", {"request_id": "op-\x00"}, "request_id"),
    ("/api/v1/asample", {"sampling_session_id": "s\x00", "seq_id": 0,
                         "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1]}]}}, "sampling_session_id"),
    ("/api/v1/optim_step", {"model_id": "m", "seq_id": 1, "adam_params": {"l\x00r": 1e-4}}, "adam_params"),
]


@pytest.mark.parametrize(("route", "body", "param"), TINKER_BODIES, ids=[f"{r} {p}" for r, _, p in TINKER_BODIES])
def test_nul_in_tinker_bodies_is_a_422_at_the_field(client, auth, route, body, param):
    """The Tinker room's JSON bodies and its protobuf forward_backward, on PostgreSQL (they were 500s)."""
    headers = {"X-API-Key": "tml-" + auth["Authorization"].split()[1]}
    api_files().assert_problem(client.post(route, json=body, headers=headers), 422, "invalid_request", param)


def test_nul_in_a_tinker_forward_backward_is_a_422_at_the_field(client, auth):
    from api.tinker.proto import ForwardBackwardRequestMessage

    headers = {"X-API-Key": "tml-" + auth["Authorization"].split()[1], "Content-Type": "application/x-protobuf"}
    msg = ForwardBackwardRequestMessage(model_id="m\x00", seq_id=1, loss_fn="cross_entropy")
    r = client.post("/api/v1/forward_backward", content=msg.SerializeToString(), headers=headers)
    api_files().assert_problem(r, 422, "invalid_request", "model_id")
