"""The Tinker room's tenancy where the generic tests (test_tenancy.py) cannot reach: ids the client sends
in request bodies (a model, a session, a sampling session, a `tinker://` path, a future), and the
signed checkpoint downloads, which take no key. Another project's ids answer exactly as unknown ones
and change nothing; a download link opens its own file only, and only until it expires."""

from __future__ import annotations

from pathlib import Path

import pytest
import security_support
from security_support import tinker_headers
from sqlalchemy import func, select

from core.models import Model, TrainerOperation


@pytest.fixture
def world(client, keel_home, monkeypatch):
    w = security_support.build_world(client, keel_home, monkeypatch, prefix="tinker-a")
    yield w
    security_support.retire_jobs(w.project_id)


def _unknown(value: str) -> str:
    return value[:-4] + "zzzz"


def _path(run_id: str, checkpoint: str) -> str:
    return f"tinker://{run_id}/{checkpoint}"


# name -> (route, the field holding one of project A's ids, the body); the same body with that id
# changed to an unknown one is the control.
BODY_REQUESTS = {
    "get_info": ("/api/v1/get_info", "model_id", lambda w: {"model_id": w.run_id}),
    "optim_step": ("/api/v1/optim_step", "model_id",
                   lambda w: {"model_id": w.run_id, "seq_id": 2, "adam_params": {"learning_rate": 1e-4}}),
    "save_weights": ("/api/v1/save_weights", "model_id", lambda w: {"model_id": w.run_id, "seq_id": 2, "path": "b"}),
    "save_weights_for_sampler": ("/api/v1/save_weights_for_sampler", "model_id",
                                 lambda w: {"model_id": w.run_id, "seq_id": 2, "path": "b"}),
    "save_weights_external": ("/api/v1/save_weights_external", "model_id",
                              lambda w: {"model_id": w.run_id, "seq_id": 2, "path": "b"}),
    "load_weights into a model": ("/api/v1/load_weights", "model_id",
                                  lambda w: {"model_id": w.run_id, "seq_id": 2, "path": "tinker://x/weights/y"}),
    "load_weights into a new model": ("/api/v1/load_weights", "session_id",
                                      lambda w: {"session_id": w.tinker_session_id, "model_seq_id": 1,
                                                 "path": _path(w.run_id, w.tinker_checkpoint)}),
    "session_heartbeat": ("/api/v1/session_heartbeat", "session_id", lambda w: {"session_id": w.tinker_session_id}),
    "create_model": ("/api/v1/create_model", "session_id",
                     lambda w: {"session_id": w.tinker_session_id, "model_seq_id": 1, "base_model": "org/name"}),
    "create_sampling_session": ("/api/v1/create_sampling_session", "session_id",
                                lambda w: {"session_id": w.tinker_session_id, "sampling_session_seq_id": 1,
                                           "base_model": "org/name"}),
    "weights_info": ("/api/v1/weights_info", "tinker_path",
                     lambda w: {"tinker_path": _path(w.run_id, w.tinker_checkpoint)}),
    "asample": ("/api/v1/asample", "sampling_session_id",
                lambda w: {"sampling_session_id": w.sampler_id, "seq_id": 0,
                           "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2]}]},
                           "sampling_params": {"max_tokens": 2}}),
}


def _operations(db, project_id: str) -> int:
    return db.scalar(select(func.count()).select_from(TrainerOperation)
                     .where(TrainerOperation.project_id == project_id))


def _owner_view(client, w) -> tuple:
    run = client.get(f"/api/v1/training_runs/{w.run_id}", headers=w.tinker_headers)
    checkpoints = client.get(f"/api/v1/training_runs/{w.run_id}/checkpoints", headers=w.tinker_headers)
    sampler = client.get(f"/api/v1/samplers/{w.sampler_id}", headers=w.tinker_headers)
    assert run.status_code == checkpoints.status_code == sampler.status_code == 200
    return run.json(), checkpoints.json(), sampler.json()


def _same_404(theirs, missing, param: str, known: str, unknown: str) -> None:
    body = security_support.api_files().assert_problem(theirs, 404, "not_found", param)
    other = missing.json()
    assert (body["type"], body["title"], body["code"], body["param"]) == \
        (other["type"], other["title"], other["code"], other["param"])
    assert body["detail"].replace(known, "ID") == other["detail"].replace(unknown, "ID")
    assert set(theirs.headers) - {"content-length", "x-request-id"} == \
        set(missing.headers) - {"content-length", "x-request-id"}


@pytest.mark.parametrize("name", list(BODY_REQUESTS))
def test_another_projects_ids_in_a_body_are_unknown(client, db, world, other_auth, name):
    path, field, make = BODY_REQUESTS[name]
    before = _owner_view(client, world), _operations(db, world.project_id)
    body = make(world)
    theirs = client.post(path, headers=tinker_headers(other_auth), json=body)
    missing = client.post(path, headers=tinker_headers(other_auth), json={**body, field: _unknown(body[field])})
    _same_404(theirs, missing, field, body[field], _unknown(body[field]))
    db.expire_all()
    assert (_owner_view(client, world), _operations(db, world.project_id)) == before


def test_another_projects_checkpoint_is_no_sampler_source(client, world, other_auth):
    """A sampling client on A's saved weights, asked for in B's own session: `model_path` not found."""
    b = tinker_headers(other_auth)
    session = client.post("/api/v1/create_session", headers=b, json={"sdk_version": "0.38.0"}).json()["session_id"]
    known = _path(world.run_id, world.tinker_checkpoint)
    answers = [client.post("/api/v1/create_sampling_session", headers=b,
                           json={"session_id": session, "sampling_session_seq_id": n, "model_path": path})
               for n, path in enumerate((known, _unknown(known)))]
    _same_404(*answers, "model_path", known, _unknown(known))
    # A native trainer of B cannot start from it either.
    r = client.post("/v1/trainers", headers=other_auth, json={"model": known})
    security_support.api_files().assert_problem(r, 404, "not_found", "model")


def test_another_projects_futures_are_unknown(client, db, world, other_auth):
    """A's request ids (a save's operation, a create_model's trainer) are no futures of B's."""
    b = tinker_headers(other_auth)
    save = db.scalar(select(TrainerOperation.id).where(TrainerOperation.project_id == world.project_id,
                                                       TrainerOperation.kind == "save_weights_for_sampler"))
    r = client.post("/api/v1/create_model", headers=world.tinker_headers, json={
        "session_id": world.tinker_session_id, "model_seq_id": 0, "base_model": "org/name"})
    created = r.json()["request_id"]  # the same create again: its first answer
    assert created.startswith("trainer-") and save.startswith("op-")
    for request_id in (save, created):
        theirs = client.post("/api/v1/retrieve_future", headers=b, json={"request_id": request_id})
        missing = client.post("/api/v1/retrieve_future", headers=b, json={"request_id": _unknown(request_id)})
        _same_404(theirs, missing, "request_id", request_id, _unknown(request_id))
        mine = client.post("/api/v1/retrieve_future", headers=world.tinker_headers, json={"request_id": request_id})
        assert mine.status_code == 200 and "error" not in mine.json(), mine.text  # the control


def test_another_projects_runs_are_never_listed(client, world, other_auth):
    b = tinker_headers(other_auth)
    for query in ("", f"?project_id={world.project_id}", f"?project_id={world.project_id}&access_scope=accessible",
                  "?access_scope=accessible"):
        page = client.get("/api/v1/training_runs" + query, headers=b).json()
        assert page["training_runs"] == [] and page["cursor"]["total_count"] == 0, query
    mine = client.get(f"/api/v1/training_runs?project_id={world.project_id}", headers=world.tinker_headers).json()
    # The Tinker training client, and the native trainer (a run too); not the sampling session's trainer.
    assert {r["training_run_id"] for r in mine["training_runs"]} == {world.run_id, world.trainer_id}


# -- signed downloads --------------------------------------------------------------------------------

def _links(client, w) -> dict[str, str]:
    r = client.get(f"/api/v1/training_runs/{w.run_id}/checkpoints/{w.tinker_checkpoint}/external_weights_urls",
                   headers=w.tinker_headers)
    assert r.status_code == 200, r.text
    return {name: url.removeprefix("http://testserver") for name, url in r.json()["urls"].items()}


def test_a_link_downloads_its_file_without_a_key(client, db, world):
    links = _links(client, world)
    saved = Path(db.get(Model, world.tinker_model_id).path)
    assert set(links) == {"config.json", "model.safetensors"}
    for name, url in links.items():
        r = client.get(url)
        assert r.status_code == 200, r.text
        assert r.content == (saved / name).read_bytes()


def test_a_link_opens_only_its_own_file(client, world):
    url = _links(client, world)["model.safetensors"]
    route, _, query = url.partition("?")
    prefix = f"/api/v1/external_weights/{world.tinker_model_id}/"
    assert route == prefix + "model.safetensors"
    expires = int(query.split("expires=")[1].split("&")[0])
    signature = query.split("signature=")[1].split("&")[0]
    forged = [
        prefix + "config.json?" + query,  # another file of the same checkpoint
        f"/api/v1/external_weights/{world.model_id}/model.safetensors?" + query,  # another model of the project
        f"/api/v1/external_weights/{_unknown(world.tinker_model_id)}/model.safetensors?" + query,  # no model
        route + "?" + query.replace(f"expires={expires}", f"expires={expires + 3600}"),  # a longer life
        route + "?" + query.replace(f"signature={signature}", f"signature={signature[1:]}{signature[0]}"),
        route + f"?expires={expires}&signature=%C3%A9{signature[2:]}",  # not ASCII
        route + "?expires=" + str(expires),  # no signature
        route,
    ]
    answers = [client.get(u, headers=world.headers) for u in forged]  # a key opens nothing here
    bodies = [security_support.api_files().assert_problem(r, 403, "invalid_signature", "signature") for r in answers]
    # The same refusal whether or not the model exists.
    assert len({(b["type"], b["title"], b["detail"]) for b in bodies}) == 1
    assert client.get(url).status_code == 200  # the control


def test_a_link_expires(client, world, monkeypatch):
    from api.tinker import runs

    monkeypatch.setattr(runs, "LINK_TTL_S", -1)
    url = _links(client, world)["model.safetensors"]
    security_support.api_files().assert_problem(client.get(url), 403, "invalid_signature", "signature")


def test_a_link_ends_with_its_checkpoint(client, world):
    url = _links(client, world)["model.safetensors"]
    assert client.get(url).status_code == 200
    r = client.delete(f"/api/v1/training_runs/{world.run_id}/checkpoints/{world.tinker_checkpoint}",
                      headers=world.tinker_headers)
    assert r.status_code == 204, r.text
    security_support.api_files().assert_problem(client.get(url), 404, "not_found", "file")
