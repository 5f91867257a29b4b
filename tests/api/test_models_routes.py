"""Models over HTTP: list, retrieve, kind filter, tenancy, and use as a later job's model."""

from __future__ import annotations

import os

import pytest

from core.models import File, Model


@pytest.fixture
def models(db, project_key):
    rows = []
    for kind in ("policy", "reward_model", "reward_model"):
        m = Model(project_id=project_key[0], name=f"{kind}-{os.urandom(2).hex()}", kind=kind, format="lora",
                  base_model="org/base", path="/nowhere")
        db.add(m)
        db.flush()
        rows.append(m.id)
    db.commit()
    return rows


def test_list_and_retrieve(client, auth, models):
    page = client.get("/v1/models?limit=2", headers=auth).json()
    assert [m["id"] for m in page["data"] if m["owned_by"] != "keel"] == models[::-1][:2] and page["has_more"]
    rms = client.get("/v1/models?kind=reward_model", headers=auth).json()["data"]
    assert [m["id"] for m in rms] == [models[2], models[1]]
    m = client.get(f"/v1/models/{models[0]}", headers=auth).json()
    assert m == {"id": models[0], "object": "model", "name": m["name"], "kind": "policy", "format": "lora",
                 "base_model": "org/base", "job_id": None, "trainer_id": None, "created_at": m["created_at"],
                 "created": m["created_at"], "owned_by": m["owned_by"],  # these two: OpenAI's names
                 "alias_of": None}  # set on a fine-tuned model's `ft:` entry only
    assert m["owned_by"].startswith("proj-")
    assert client.get("/v1/models?kind=critic", headers=auth).json()["param"] == "kind"


def test_other_projects_models_are_404(client, other_auth, models):
    r = client.get(f"/v1/models/{models[0]}", headers=other_auth)
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (404, "not_found", "model_id")
    assert [m for m in client.get("/v1/models", headers=other_auth).json()["data"] if m["owned_by"] != "keel"] == []


def test_shared_base_models_end_the_first_page(client, auth, other_auth, models, keel_home):
    """Model directories under the model root (a config.json), for every project, OpenAI-shaped; not
    a tokenizer or data directory, not on later pages, not when only scoring models are asked for."""
    root = keel_home / "models" / f"shared-{os.urandom(3).hex()}"
    (root / "org" / "tiny").mkdir(parents=True)
    (root / "org" / "tiny" / "config.json").write_text("{}")
    (root / "data").mkdir()
    for headers in (auth, other_auth):
        page = client.get("/v1/models?limit=1", headers=headers).json()
        shared = {m["id"]: m for m in page["data"] if m["owned_by"] == "keel"}
        assert page["object"] == "list" and str(root / "org" / "tiny") in shared
        assert not any(i.startswith(str(root / "data")) for i in shared)
        entry = shared[str(root / "org" / "tiny")]
        assert entry["object"] == "model" and entry["kind"] == "policy" and entry["created"] > 0
        assert entry["name"] == f"{root.name}/org/tiny"
    later = client.get(f"/v1/models?after={models[2]}", headers=auth).json()["data"]
    assert not any(m["owned_by"] == "keel" for m in later)
    scoring = client.get("/v1/models?kind=reward_model", headers=auth).json()["data"]
    assert not any(m["owned_by"] == "keel" for m in scoring)


def test_models_train_later_jobs(client, auth, db, project_key, models, monkeypatch):
    from workers import dispatch

    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: True)
    f = File(project_id=project_key[0], purpose="prompts", filename="p.jsonl", bytes=1, sha256=os.urandom(16).hex(),
             format="jsonl", storage_key="files/x")
    db.add(f)
    db.commit()
    body = {"model": models[0], "training_file": f.id,
            "method": {"type": "ppo", "reward": {"model": models[1]}}}
    r = client.post("/v1/jobs", json=body, headers=auth)
    assert r.status_code == 201, r.text
    assert r.json()["model"] == models[0] and r.json()["method"]["reward"]["model"] == models[1]
