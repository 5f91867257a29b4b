"""Reproducible runs and forks, through the API and the worker's task (in this process, on the local
executor: no Ray, no broker): every job records its manifest when it starts; a fork of a job at a
checkpoint, without overrides, trains the parent's very steps after it (metrics and final weights
bitwise equal on CPU); bad fork requests are problem+json naming their field."""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path

import pytest
import torch
from factories import add_file, events_of, get_job
from safetensors.torch import load_file

from core.capacity import Admission
from core.config import settings
from core.db import session_scope
from core.models import Checkpoint, File
from workers import tasks
from workers.resolve import job_dirs

STEPS = 3
HYPERPARAMETERS = {"data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
                   "optim": {"lr": 1e-3, "lr_warmup_steps_ratio": 0.3, "lr_scheduler_type": "linear"},
                   "trainer": {"total_training_steps": STEPS, "save_freq": 1, "test_freq": -1}}
"""A checkpoint every step; warm-up and a linear decay, so a fork that lost the scheduler's or the
optimizer's state would train other numbers."""


@pytest.fixture(autouse=True)
def no_ray(monkeypatch):
    """The jobs run on the local executor in this process: joining Ray and its capacity checks are stubbed."""
    monkeypatch.setattr(tasks, "connect", lambda *a, **kw: None)
    monkeypatch.setattr(tasks, "start_publisher", lambda: None)
    monkeypatch.setattr(tasks, "claim_check", lambda job_id, spec: Admission("ok"))


@pytest.fixture(scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the same float summation order in the parent and the fork
    yield
    torch.set_num_threads(before)


def _create(client, auth, demo_assets, file_id: str) -> str:
    r = client.post("/v1/jobs", headers=auth, json={
        "model": demo_assets["model"], "training_file": file_id, "seed": 5, "resources": {"executor": "local"},
        "method": {"type": "sft", "hyperparameters": HYPERPARAMETERS}})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _metrics(job_id: str) -> dict[int, dict]:
    """Each step's metrics but its wall-clock ones (`timing_s/`, `perf/`)."""
    return {e.data["step"]: {k: v for k, v in e.data["values"].items() if not k.startswith(("timing_s/", "perf/"))}
            for e in events_of(job_id) if e.type == "job.metrics"}


@pytest.fixture(scope="module")
def parent(one_thread, app, demo_assets):
    """A finished 3-step SFT job with a checkpoint at every step: (project id, key, job id, training file)."""
    from core.security import create_api_key, get_or_create_project

    with session_scope() as db:
        project, _ = get_or_create_project(db, f"forks-{os.urandom(4).hex()}")
        key = create_api_key(db, project)
        project_id = project.id
        db.commit()
    from fastapi.testclient import TestClient

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tasks, "connect", lambda *a, **kw: None)
        mp.setattr(tasks, "start_publisher", lambda: None)
        mp.setattr(tasks, "claim_check", lambda job_id, spec: Admission("ok"))
        train = add_file(project_id, demo_assets["sft_train"])
        with TestClient(app) as client:
            job_id = _create(client, {"Authorization": f"Bearer {key}"}, demo_assets, train)
        assert tasks.run_job(job_id).startswith("succeeded"), get_job(job_id).error
    return project_id, key, job_id, train


def test_a_job_records_its_manifest_when_it_starts(client, parent, demo_assets):
    _, key, job_id, train = parent
    auth = {"Authorization": f"Bearer {key}"}
    r = client.get(f"/v1/jobs/{job_id}/manifest", headers=auth)
    assert r.status_code == 200, r.text
    manifest = r.json()
    assert manifest["object"] == "job.manifest" and manifest["job_id"] == job_id and manifest["attempt"] == 1
    assert manifest["method"] == "sft"
    assert manifest["packages"]["torch"] == importlib.metadata.version("torch")
    assert set(manifest["packages"]) == {"keel", "torch", "transformers", "peft", "vllm", "ray"}
    assert manifest["packages"]["keel"] is not None
    config = manifest["config"]  # as the engine ran it: every default filled in
    assert config["trainer"]["total_training_steps"] == STEPS and config["optim"]["lr"] == 1e-3
    assert "weight_decay" in config["optim"]
    assert manifest["seeds"]["seed"] == 5
    with session_scope() as db:
        sha = db.get(File, train).sha256
    assert manifest["datasets"]["training_file"]["id"] == train
    assert manifest["datasets"]["training_file"]["sha256"] == sha
    assert manifest["datasets"]["validation_file"] is None
    assert manifest["base_model"]["ref"] == demo_assets["model"]
    assert len(manifest["base_model"]["sha256"]) == 64
    hardware = manifest["hardware"]
    assert hardware["cpu_count"] == os.cpu_count() and hardware["memory_bytes"] > 0
    assert hardware["ray_nodes"] is None  # the local executor: no Ray
    assert manifest["forked_from"] is None
    # Nothing names a deployment path (the model's reference is the tenant's own input).
    shown = json.dumps({k: v for k, v in manifest.items() if k != "base_model"})
    for root in (str(settings.home), *settings.model_roots):
        assert root not in shown


def test_a_queued_job_has_no_manifest_yet(client, parent):
    _, key, job_id, _ = parent
    auth = {"Authorization": f"Bearer {key}"}
    fork = client.post(f"/v1/jobs/{job_id}/fork", headers=auth, json={"checkpoint": 2})
    assert fork.status_code == 201, fork.text
    r = client.get(f"/v1/jobs/{fork.json()['id']}/manifest", headers=auth)
    assert r.status_code == 404 and r.json()["code"] == "manifest_not_ready", r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    client.post(f"/v1/jobs/{fork.json()['id']}/cancel", headers=auth)


def test_a_fork_without_overrides_trains_the_parents_steps_bitwise(client, parent):
    _, key, job_id, _ = parent
    auth = {"Authorization": f"Bearer {key}"}
    with session_scope() as db:
        ckpt = db.scalar(Checkpoint.__table__.select().with_only_columns(Checkpoint.id)
                         .where(Checkpoint.job_id == job_id, Checkpoint.step == 1))
    r = client.post(f"/v1/jobs/{job_id}/fork", headers=auth, json={"checkpoint": ckpt})
    assert r.status_code == 201, r.text
    fork = r.json()
    assert fork["forked_from"] == {"job": job_id, "checkpoint": ckpt, "step": 1}
    assert fork["from_checkpoint"] == ckpt and fork["status"] == "queued"
    assert fork["method"] == client.get(f"/v1/jobs/{job_id}", headers=auth).json()["method"]
    assert client.get(f"/v1/jobs/{fork['id']}", headers=auth).json()["forked_from"]["job"] == job_id

    assert tasks.run_job(fork["id"]).startswith("succeeded"), get_job(fork["id"]).error
    want, got = _metrics(job_id), _metrics(fork["id"])
    assert sorted(got) == [2, 3]  # steps 2.. only: step 1 is the checkpoint's
    assert "train/loss" in want[2] and "train/lr" in want[2]
    for step in (2, 3):
        assert got[step] == want[step], f"step {step}: {got[step]} != {want[step]}"  # exactly
    a = load_file(str(Path(job_dirs(job_id)[0]) / "model.safetensors"))
    b = load_file(str(Path(job_dirs(fork["id"])[0]) / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    manifest = client.get(f"/v1/jobs/{fork['id']}/manifest", headers=auth).json()
    assert manifest["forked_from"] == {"job": job_id, "checkpoint": ckpt, "step": 1}
    assert manifest["from_checkpoint"] == ckpt


def test_a_fork_with_overrides_merges_them_over_the_parents(client, parent):
    _, key, job_id, _ = parent
    auth = {"Authorization": f"Bearer {key}"}
    r = client.post(f"/v1/jobs/{job_id}/fork", headers=auth,
                    json={"checkpoint": 2, "hyperparameters": {"optim": {"weight_decay": 0.5}}})
    assert r.status_code == 201, r.text
    hp = r.json()["method"]["hyperparameters"]
    assert hp["optim"]["weight_decay"] == 0.5 and hp["optim"]["lr"] == 1e-3  # merged, not replaced
    assert hp["trainer"]["total_training_steps"] == STEPS
    assert r.json()["forked_from"]["step"] == 2
    client.post(f"/v1/jobs/{r.json()['id']}/cancel", headers=auth)


def test_a_forks_learning_rate_override_is_the_one_it_trains_with(client, parent):
    """The checkpoint's optimizer and scheduler states carry the parent's learning rate: the fork's own
    wins (`engine.runtime.checkpoint.load_state`), rescaling where the schedule stands (warm-up, then linear)."""
    _, key, job_id, _ = parent
    auth = {"Authorization": f"Bearer {key}"}
    r = client.post(f"/v1/jobs/{job_id}/fork", headers=auth, json={"checkpoint": 1, "hyperparameters": {
        "optim": {"lr": 1e-2, "weight_decay": 0.25}}})
    assert r.status_code == 201, r.text
    assert tasks.run_job(r.json()["id"]).startswith("succeeded"), get_job(r.json()["id"]).error
    want, got = _metrics(job_id), _metrics(r.json()["id"])
    assert sorted(got) == [2, 3]
    for step in (2, 3):
        assert got[step]["train/lr"] == pytest.approx(10 * want[step]["train/lr"], rel=1e-12)
    assert got[2]["train/loss"] == want[2]["train/loss"]  # the same weights going in
    assert got[3]["train/loss"] != want[3]["train/loss"]  # trained differently from there


@pytest.mark.parametrize("body, status, code, param", [
    ({"checkpoint": "ckpt-doesnotexist"}, 404, "not_found", "checkpoint"),
    ({"checkpoint": 7}, 404, "not_found", "checkpoint"),
    ({"checkpoint": 0}, 422, "invalid_request", "checkpoint"),
    ({"checkpoint": 1, "hyperparameters": {"optim": {"lr": -1}}}, 422, "invalid_request", "hyperparameters.optim.lr"),
    ({"checkpoint": 1, "hyperparameters": {"optim": {"bogus": 1}}}, 422, "unknown_parameter",
     "hyperparameters.optim.bogus"),
    ({"checkpoint": 1, "hyperparameters": {"trainer": 5}}, 422, "invalid_request", "hyperparameters.trainer"),
])
def test_bad_fork_requests_name_their_field(client, parent, body, status, code, param):
    _, key, job_id, _ = parent
    r = client.post(f"/v1/jobs/{job_id}/fork", headers={"Authorization": f"Bearer {key}"}, json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert (r.json()["code"], r.json()["param"]) == (code, param), r.text


def test_a_checkpoint_of_another_job_is_refused(client, parent, demo_assets):
    project_id, key, job_id, train = parent
    auth = {"Authorization": f"Bearer {key}"}
    other = _create(client, auth, demo_assets, train)  # queued, never run: it only needs a checkpoint of its own
    client.post(f"/v1/jobs/{other}/cancel", headers=auth)
    with session_scope() as db:
        path = db.scalar(Checkpoint.__table__.select().with_only_columns(Checkpoint.path)
                         .where(Checkpoint.job_id == job_id, Checkpoint.step == 1))
        row = Checkpoint(job_id=other, project_id=project_id, step=1, path=path)
        db.add(row)
        db.flush()
        foreign = row.id
    r = client.post(f"/v1/jobs/{job_id}/fork", headers=auth, json={"checkpoint": foreign})
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (422, "invalid_checkpoint", "checkpoint"), r.text


def test_another_projects_job_is_not_found(client, parent, other_auth):
    _, _, job_id, _ = parent
    for r in (client.post(f"/v1/jobs/{job_id}/fork", headers=other_auth, json={"checkpoint": 1}),
              client.get(f"/v1/jobs/{job_id}/manifest", headers=other_auth)):
        assert (r.status_code, r.json()["code"], r.json()["param"]) == (404, "not_found", "job_id"), r.text


def test_a_job_on_ray_records_its_manifest_in_its_controller(client, parent, demo_assets, monkeypatch):
    """The default executor: the manifest is collected in the job's Ray controller (on the node that runs
    it) and written by the reporter it was pickled with."""
    import ray

    from engine.runtime.cluster import connect

    monkeypatch.setattr(tasks, "connect", connect)  # a local Ray in this process, as a worker joins one
    joined = ray.is_initialized()
    _, key, _, train = parent
    auth = {"Authorization": f"Bearer {key}"}
    r = client.post("/v1/jobs", headers=auth, json={
        "model": demo_assets["model"], "training_file": train, "seed": 5,
        "method": {"type": "sft", "hyperparameters": {**HYPERPARAMETERS, "trainer": {"total_training_steps": 1}}}})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    try:
        assert tasks.run_job(job_id).startswith("succeeded"), get_job(job_id).error
    finally:
        if not joined:  # this test's own Ray: nothing later in the session finds it running
            ray.shutdown()
    manifest = client.get(f"/v1/jobs/{job_id}/manifest", headers=auth).json()
    assert manifest["hardware"]["ray_nodes"] == 1 and manifest["hardware"]["ray"]["cpus"] >= 1
    assert manifest["resources"]["executor"] == "ray" and manifest["packages"]["ray"] is not None
    assert len(manifest["base_model"]["sha256"]) == 64
