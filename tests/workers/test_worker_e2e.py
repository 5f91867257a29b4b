"""End to end: job rows run through the broker, a real Celery worker (with its sweeper) and a real
local Ray, training the demo model with the real `sft` method."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from factories import TINY_SFT, add_file, add_job, add_running_job, events_of, get_job, wait_for
from sqlalchemy import select, update

from bench.common import free_port
from core.db import session_scope
from core.events import append_event
from core.models import Checkpoint, Job, Model
from workers import dispatch
from workers.reporter import TERMINAL
from workers.resolve import job_dirs

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

_RAY_WATCH = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False)
total = ray.cluster_resources().get("CPU", 0.0)
print("busy", total, ray.available_resources().get("CPU", 0.0), flush=True)
sys.stdin.readline()
deadline = time.time() + 30
while ray.available_resources().get("CPU", 0.0) < total and time.time() < deadline:
    time.sleep(0.2)
print("free", total, ray.available_resources().get("CPU", 0.0), flush=True)
"""
"""A driver on the test cluster: prints the CPUs (total, available) now, and again once all are free
after a line on stdin. A separate process, so this one's Ray state (engine tests) is left alone."""


def wait_terminal(job_id: str, timeout: float) -> Job:
    return wait_for(lambda: (job := get_job(job_id)).status in TERMINAL and job, timeout, what=f"{job_id} to finish")


def cancel(job_id: str) -> None:
    """What `POST /v1/jobs/{id}/cancel` does to a running job."""
    with session_scope() as db:
        assert db.execute(update(Job).where(Job.id == job_id, Job.status == "running")
                          .values(status="cancelling")).rowcount == 1
        append_event(db, job_id, "job.status", {"status": "cancelling"})
    dispatch.request_cancel(job_id)


def test_engine_errors_keep_their_code_through_ray(celery_worker, project_id, demo_assets):
    wrong = add_file(project_id, demo_assets["preference_train"])  # no `response` column for sft
    job_id = add_job(project_id, wrong, model=demo_assets["model"], hyperparameters=TINY_SFT)
    assert dispatch.enqueue_job(job_id) is True
    job = wait_terminal(job_id, 120)
    assert job.status == "failed" and job.error["code"] == "invalid_file", job.error
    assert [e.type for e in events_of(job_id)][-3:] == ["job.error", "job.status", "job.done"]


def test_cancel_a_running_job_frees_its_ray_resources(celery_worker, ray_cluster, project_id, demo_assets):
    train = add_file(project_id, demo_assets["sft_train"])
    long_run = {**TINY_SFT, "trainer": {"total_training_steps": 100_000, "save_freq": -1}}
    job_id = add_job(project_id, train, model=demo_assets["model"], hyperparameters=long_run,
                     resources={"num_workers": 2, "cpus_per_worker": 1.0})
    assert dispatch.enqueue_job(job_id) is True
    wait_for(lambda: any(e.type == "job.metrics" for e in events_of(job_id)), 240, what="the first step")
    watch = subprocess.Popen([sys.executable, "-c", _RAY_WATCH, ray_cluster], cwd=ROOT, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        _, total, free = watch.stdout.readline().split()
        assert float(free) < float(total)  # the two data-parallel workers hold the cluster's CPUs

        cancel(job_id)
        start = time.monotonic()
        job = wait_terminal(job_id, 30)
        assert job.status == "cancelled" and time.monotonic() - start < 10
        assert [e.data for e in events_of(job_id)][-2:] == [{"status": "cancelled"}, {"status": "cancelled"}]
        watch.stdin.write("\n")
        watch.stdin.flush()
        _, total, free = watch.stdout.readline().split()
        assert float(free) == float(total)  # the controller's placement group went with it
    finally:
        watch.kill()
        watch.wait()


def test_job_accepted_while_the_broker_is_down_runs_to_succeeded_once_it_is_back(celery_worker, project_id,
                                                                                demo_assets):
    """The whole path: outbox (broker down) -> the worker's sweeper -> Celery -> Ray -> real SFT -> model."""
    train = add_file(project_id, demo_assets["sft_train"])
    # Hold the project at its running limit, so the worker's sweeper leaves the job alone until we look.
    blockers = [add_running_job(project_id, train) for _ in range(2)]
    job_id = add_job(project_id, train, model=demo_assets["model"], hyperparameters=TINY_SFT, suffix="demo")

    # The API process, with the broker unreachable (nothing listens on that port).
    env = {**os.environ, "KEEL_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0"}
    code = f"from workers.dispatch import enqueue_job; print(enqueue_job({job_id!r}))"
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split()[-1] == "False", out.stderr[-2000:]
    job = get_job(job_id)
    assert (job.status, job.dispatched_at) == ("queued", None)

    with session_scope() as db:  # slots free up; the broker is reachable again (for the worker's sweeper)
        db.execute(update(Job).where(Job.id.in_(blockers)).values(status="succeeded"))
    job = wait_terminal(job_id, 240)
    assert job.status == "succeeded", job.error
    assert job.attempts == 1 and job.dispatched_at and job.started_at and job.finished_at and job.error is None
    assert job.progress["step"] == 4 and job.progress["total_steps"] == 4
    assert "train/loss" in job.latest_metrics and "val/loss" in job.latest_metrics
    with session_scope() as db:
        model = db.get(Model, job.output_model_id)
        checkpoints = db.scalars(select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.step)).all()
    assert (model.kind, model.format, model.name, model.base_model, model.job_id) == (
        "policy", "hf", "model:demo", demo_assets["model"], job_id)
    assert model.path == job_dirs(job_id)[0] and os.path.isfile(os.path.join(model.path, "config.json"))
    assert [c.step for c in checkpoints] == [2, 4] and all(c.bytes > 0 for c in checkpoints)

    events = events_of(job_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].type == "job.status" and events[0].data == {"status": "running"}
    assert [e.data["step"] for e in events if e.type == "job.metrics"] == [1, 2, 3, 4]
    assert [e.data for e in events if e.type == "job.checkpoint"] == [
        {"checkpoint_id": c.id, "step": c.step, "metrics": c.metrics} for c in checkpoints]
    assert any(e.type == "job.log" for e in events)
    assert [(e.type, e.data) for e in events[-2:]] == [("job.status", {"status": "succeeded"}),
                                                        ("job.done", {"status": "succeeded"})]


