"""POST /v1/jobs with method `dpo`: defaults, knob validation with the exact `param`, file purpose."""

from __future__ import annotations

import secrets

import pytest

from core.models import File, Job


def _file(db, project_id: str, purpose: str) -> str:
    f = File(project_id=project_id, purpose=purpose, filename=f"{purpose}.parquet", bytes=10,
             sha256=secrets.token_hex(32), format="parquet", storage_key=f"files/{secrets.token_hex(4)}")
    db.add(f)
    db.commit()
    return f.id


@pytest.fixture
def files(db, project_key):
    return {p: _file(db, project_key[0], p) for p in ("sft", "preference", "prompts")}


def dpo_body(files, **hyperparameters) -> dict:
    return {"model": "org/name", "training_file": files["preference"], "validation_file": files["preference"],
            "method": {"type": "dpo", "hyperparameters": hyperparameters}}


def test_dpo_job_is_created_with_trl_defaults(client, auth, db, files, awaiting_dispatch):
    r = client.post("/v1/jobs", json=dpo_body(files, beta=0.25, loss_type="ipo"), headers=auth)
    assert r.status_code == 201, r.text
    job = r.json()
    hp = job["method"]["hyperparameters"]
    assert job["method"]["type"] == "dpo"
    assert (hp["beta"], hp["loss_type"], hp["label_smoothing"]) == (0.25, "ipo", 0.0)
    assert hp["optim"]["lr"] == 1e-6 and hp["model"]["lora_rank"] == 0 and hp["max_token_len_per_gpu"] == 3072
    assert db.get(Job, job["id"]).method == "dpo" and awaiting_dispatch(job["id"])
    defaults = client.post("/v1/jobs", json=dpo_body(files), headers=auth).json()["method"]["hyperparameters"]
    assert (defaults["beta"], defaults["loss_type"], defaults["label_smoothing"]) == (0.1, "sigmoid", 0.0)
    # VERL-style dotted overrides reach the DPO knobs too.
    body = dpo_body(files)
    body["method"]["overrides"] = ["beta=0.5", "label_smoothing=0.1"]
    r = client.post("/v1/jobs", json=body, headers=auth)
    assert r.status_code == 201, r.text
    assert r.json()["method"]["hyperparameters"]["beta"] == 0.5
    assert r.json()["method"]["hyperparameters"]["label_smoothing"] == 0.1


@pytest.mark.parametrize(("knobs", "param"), [
    ({"beta": 0}, "beta"), ({"beta": -0.1}, "beta"), ({"beta": "0.1"}, "beta"),
    ({"loss_type": "hinge"}, "loss_type"), ({"label_smoothing": 0.5}, "label_smoothing"),
    ({"loss_type": "ipo", "label_smoothing": 0.1}, "label_smoothing"), ({"gamma": 1.0}, "gamma"),
])
def test_bad_dpo_knobs_are_422_naming_the_field(client, auth, files, dispatched, knobs, param):
    r = client.post("/v1/jobs", json=dpo_body(files, **knobs), headers=auth)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["param"] == f"method.hyperparameters.{param}", r.json()
    assert dispatched == []


@pytest.mark.parametrize(("field", "purpose"), [("training_file", "sft"), ("training_file", "prompts"),
                                                ("validation_file", "sft")])
def test_dpo_needs_preference_files(client, auth, files, dispatched, field, purpose):
    body = dpo_body(files)
    body[field] = files[purpose]
    r = client.post("/v1/jobs", json=body, headers=auth)
    assert r.status_code == 422, r.text
    assert (r.json()["code"], r.json()["param"]) == ("invalid_file_purpose", field)
    assert "'preference'" in r.json()["detail"] and dispatched == []
