"""Pause and resume end to end: Keel's HTTP API, the broker, the session's real Celery worker and a real
Ray cluster, training the demo model with SFT.

A running job asked to pause checkpoints the step it stopped after, its controller exits and every Ray
CPU is free while it is paused; resumed, it continues from that checkpoint to `succeeded` with every
step reported exactly once, and trains the very weights of the same job run without a pause."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from factories import add_file, events_of, get_job, wait_for
from safetensors.torch import load_file
from sqlalchemy import select

from core.db import session_scope
from core.models import Checkpoint
from engine.runtime.jobs import actor_name
from workers.reporter import TERMINAL
from workers.resolve import job_dirs

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STEPS = 160
"""Long enough that the pause lands mid-run on a fast quiet machine (40 steps once finished before the
worker saw the pause)."""
HYPERPARAMETERS = {"data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
                   "optim": {"lr": 1e-3}, "trainer": {"total_training_steps": STEPS, "save_freq": -1, "test_freq": -1}}
"""No periodic checkpoints: the one the pause writes is the only one before the last step's."""

_RAY_FREE = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)
total, deadline = ray.cluster_resources().get("CPU", 0.0), time.time() + 30
while ray.available_resources().get("CPU", 0.0) < total and time.time() < deadline:
    time.sleep(0.2)
try:
    ray.get_actor(sys.argv[2], namespace="keel")
    alive = True
except ValueError:
    alive = False
print(total, ray.available_resources().get("CPU", 0.0), alive, flush=True)
"""
"""A driver on the test cluster (a separate process: this one's Ray state is left alone): waits up to
30 s for every CPU to be free, then prints total CPUs, free CPUs and whether the actor is alive."""


def _create(client, auth, model: str, file_id: str) -> str:
    r = client.post("/v1/jobs", headers=auth, json={
        "model": model, "training_file": file_id, "seed": 11,
        "method": {"type": "sft", "hyperparameters": HYPERPARAMETERS}})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _status(job_id: str, wanted: tuple[str, ...], timeout: float):
    return wait_for(lambda: (job := get_job(job_id)).status in wanted and job, timeout,
                    what=f"{job_id} to be {'/'.join(wanted)}")


def _ray_after_pause(ray_address: str, job_id: str) -> tuple[float, float, bool]:
    out = subprocess.run([sys.executable, "-c", _RAY_FREE, ray_address, actor_name(job_id)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=True)
    total, free, alive = out.stdout.split()
    return float(total), float(free), alive == "True"


def test_pause_releases_ray_and_resume_continues_exactly(celery_worker, ray_cluster, client, project_key,
                                                          demo_assets):
    auth = {"Authorization": f"Bearer {project_key[1]}"}
    train = add_file(project_key[0], demo_assets["sft_train"])
    job_id = _create(client, auth, demo_assets["model"], train)
    wait_for(lambda: any(e.type == "job.metrics" for e in events_of(job_id)), 240, what="the first step")

    r = client.post(f"/v1/jobs/{job_id}/pause", headers=auth)
    assert (r.status_code, r.json()["status"]) == (200, "pausing"), r.text
    job = _status(job_id, ("paused",) + TERMINAL, 120)
    assert job.status == "paused", job.error
    step = job.progress["step"]
    assert 1 <= step < STEPS
    assert (job.worker_id, job.heartbeat_at, job.finished_at) == (None, None, None)
    with session_scope() as db:
        saved = db.scalars(select(Checkpoint).where(Checkpoint.job_id == job_id)).all()
    assert [c.step for c in saved] == [step] and Path(saved[0].path, "COMPLETE").is_file()
    total, free, alive = _ray_after_pause(ray_cluster, job_id)
    assert (free, alive) == (total, False)  # the controller is gone and with it every CPU it held
    assert client.get(f"/v1/jobs/{job_id}", headers=auth).json()["status"] == "paused"

    r = client.post(f"/v1/jobs/{job_id}/resume", headers=auth)
    assert (r.status_code, r.json()["status"]) == (200, "queued"), r.text
    job = _status(job_id, TERMINAL, 300)
    assert job.status == "succeeded", job.error
    assert job.attempts == 2 and job.progress["step"] == STEPS

    events = events_of(job_id)
    assert [e.data["step"] for e in events if e.type == "job.metrics"] == list(range(1, STEPS + 1))
    assert [e.data["status"] for e in events if e.type == "job.status"] == [
        "running", "pausing", "paused", "queued", "running", "succeeded"]
    assert any(e.type == "job.log" and e.data["message"].startswith(f"paused after step {step};") for e in events)
    assert any(e.type == "job.log" and e.data["message"].startswith("resumed from") for e in events)

    reference = _create(client, auth, demo_assets["model"], train)  # the same job, never paused
    assert _status(reference, TERMINAL, 300).status == "succeeded"
    got = load_file(str(Path(job_dirs(job_id)[0]) / "model.safetensors"))
    want = load_file(str(Path(job_dirs(reference)[0]) / "model.safetensors"))
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert torch.equal(got[name], value), f"{name} differs from the run without a pause"
