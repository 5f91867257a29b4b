"""A Celery worker SIGKILLed in the middle of a PPO job.

The job's Ray controller is a detached actor: it outlives the worker and keeps training (and
reporting, while the attempt still owns the job) until the job is taken from it. What must hold:
a sweeper sees the silence within the heartbeat timeout and re-queues the job; the orphaned
controller stops itself (or the next attempt kills it by name); Ray gets every CPU back; the next
attempt resumes from the newest checkpoint the log recorded (never a half-written one), runs to
`succeeded`, its metrics cover every step exactly once, and the weights equal an uninterrupted run's.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from fault_processes import ROOT, wait_until
from fault_stack import HEARTBEAT_TIMEOUT_S, PPO_HYPERPARAMETERS, assert_step_log
from safetensors.torch import load_file
from sqlalchemy import func, select

from core.models import Checkpoint, Job, utcnow
from engine.runtime.jobs import ORPHAN_GRACE_S, actor_name
from workers.resolve import job_dirs, resolve_request

pytestmark = [pytest.mark.faults, pytest.mark.slow]

TOTAL_STEPS = PPO_HYPERPARAMETERS["trainer"]["total_training_steps"]
SAVE_FREQ = PPO_HYPERPARAMETERS["trainer"]["save_freq"]
REQUEUED = ["running", "queued", "running", "succeeded"]

_SWEEP = """
import sys, time
from workers.sweeper import recover_lost_jobs
job_id, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    if job_id in recover_lost_jobs().requeued:
        print("requeued", flush=True)
        break
    time.sleep(0.25)
"""
"""Another worker's sweeper, recovery only: re-queues the job once its heartbeat is stale, then exits."""

_REFERENCE = """
import pickle, sys
from engine.runtime.cluster import connect
from engine.methods.ppo import run_ppo
from engine.runtime.reporting import RecordingReporter
with open(sys.argv[1], "rb") as f:
    request = pickle.load(f)
connect(request.ray_address)
run_ppo(request, RecordingReporter())
"""


class Reference:
    """The uninterrupted run: `engine.methods.ppo.run_ppo` on the job's own resolved request (fresh output and
    checkpoint directories, no resume), in a background Ray driver on the same cluster."""

    def __init__(self, stack, job_id: str, out: Path) -> None:
        with stack.session() as db:
            request = resolve_request(db, db.get(Job, job_id))
        self.config = request.config
        self.request = dataclasses.replace(request, job_id=f"{job_id}-reference", output_dir=str(out / "output"),
                                           checkpoint_dir=str(out / "checkpoints"), resume_from=None,
                                           ray_address=stack.ray_address)
        out.mkdir(parents=True, exist_ok=True)
        (out / "request.pkl").write_bytes(pickle.dumps(self.request))
        self.log = out / "reference.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", _REFERENCE, str(out / "request.pkl")], cwd=ROOT,
                                         env=stack.env, stdout=log, stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 240) -> None:
        rc = self.proc.wait(timeout=timeout)
        assert rc == 0, self.log.read_text(errors="replace")[-4000:]

    def weights(self) -> dict[str, torch.Tensor]:
        self.wait()
        return load_file(str(Path(self.request.output_dir) / "model.safetensors"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Starts the reference run for the first job that asks; later jobs of the same spec share it."""
    runs: dict[str, Reference] = {}

    class Runs:
        def start(self, stack, job_id: str) -> Reference:
            if "ppo" not in runs:
                runs["ppo"] = Reference(stack, job_id, tmp_path_factory.mktemp("ppo-reference"))
            run = runs["ppo"]
            with stack.session() as db:
                assert resolve_request(db, db.get(Job, job_id)).config == run.config
            return run

    yield Runs()
    for run in runs.values():
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()


def assert_same_weights(job_id: str, reference: Reference) -> None:
    got = load_file(str(Path(job_dirs(job_id)[0]) / "model.safetensors"))
    want = reference.weights()
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert torch.equal(got[name], value), f"{name} differs from the uninterrupted run"


def complete_steps(checkpoint_dir: Path) -> list[int]:
    return sorted(int(p.name.removeprefix("step_")) for p in checkpoint_dir.glob("step_*") if (p / "COMPLETE").is_file())


def plant_half_written_checkpoint(checkpoint_dir: Path, step: int) -> None:
    """What a crash in the middle of writing step `step` can leave: the writer's temporary directory,
    and (a copy interrupted by hand, an old layout) a `step_<N>` directory without its marker."""
    for path in (checkpoint_dir / f".step_{step}.tmp-dead0001", checkpoint_dir / f"step_{step}"):
        (path / "actor").mkdir(parents=True)
        (path / "actor" / "model.safetensors").write_bytes(b"\x00" * 100)  # truncated: unreadable
        (path / "extra.json").write_text("{")


def resumed_from(events) -> str:
    logs = [e.data["message"] for e in events if e.type == "job.log" and e.data["message"].startswith("resumed from ")]
    assert len(logs) == 1, logs
    # "resumed from KEY at step N" (supervised) or "resumed from KEY: continuing after step N ..." (PPO)
    return re.match(r"resumed from (\S+?)(?::| at step | after step )", logs[0]).group(1)


def test_worker_killed_after_a_checkpoint_is_detected_its_controller_stops_and_the_job_resumes(stack, reference):
    """Kill right after the step-2 checkpoint (the next step is generating); no worker comes back
    until the orphaned controller is gone, so it must stop by itself."""
    job_id = stack.create_ppo_job()
    controller = actor_name(job_id)
    # Another worker's sweeper (lost-worker recovery only): the one in the stack's worker dies with it.
    sweeper = subprocess.Popen([sys.executable, "-c", _SWEEP, job_id, "300"], cwd=ROOT, env=stack.env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        stack.wait_event(job_id, lambda e: e.type == "job.checkpoint", 240, "the first checkpoint")
        stack.worker.kill()
        last_beat = stack.job(job_id).heartbeat_at
        assert stack.probe.actor_alive(controller), "the detached controller should outlive its worker"
        ref = reference.start(stack, job_id)  # meanwhile: the cluster has a CPU to spare
        lost = stack.wait_event(job_id, lambda e: e.type == "job.warning" and e.data["code"] == "worker_lost",
                                60, "the lost worker to be noticed", interval=0.2)
    finally:
        sweeper.kill()
        sweeper.wait()
    silence = (lost.created_at - last_beat).total_seconds()
    assert HEARTBEAT_TIMEOUT_S <= silence <= HEARTBEAT_TIMEOUT_S + 3, silence
    assert stack.job(job_id).status == "queued"

    # Nobody kills the orphan: it sees the job is no longer its attempt's and exits on its own.
    wait_until(lambda: not stack.probe.actor_alive(controller), ORPHAN_GRACE_S + 20, interval=0.5,
               what="the orphaned controller to exit")
    stopped_after = (utcnow() - lost.created_at).total_seconds()
    assert stopped_after <= ORPHAN_GRACE_S + 8, stopped_after

    # The newest checkpoint the log recorded: the orphan may have saved newer ones after the requeue
    # (their reports dropped), and one past the newest on disk is left half-written here.
    checkpoint_dir = Path(job_dirs(job_id)[1])
    with stack.session() as db:
        expected = db.scalar(select(func.max(Checkpoint.step)).where(Checkpoint.job_id == job_id))
    plant_half_written_checkpoint(checkpoint_dir, max(complete_steps(checkpoint_dir)) + SAVE_FREQ)

    stack.worker.start()
    job = stack.wait_terminal(job_id, 240)
    assert (job.status, job.attempts, job.error) == ("succeeded", 2, None)
    events = stack.events(job_id)
    assert resumed_from(events) == f"jobs/{job_id}/checkpoints/step_{expected}"  # (a key: events name no path)
    assert_step_log(events, total_steps=TOTAL_STEPS, save_freq=SAVE_FREQ, statuses=REQUEUED)
    assert_same_weights(job_id, ref)
    stack.probe.wait_all_free(30)  # nothing of the orphan (or the reference run) holds a CPU


def test_worker_killed_mid_update_and_restarted_kills_the_leftover_controller_and_resumes(stack, reference):
    """Kill in the middle of step 4's update (timed from step 3's phase timings) and restart at once:
    the new attempt finds the old controller still alive and kills it by name."""
    job_id = stack.create_ppo_job()
    ref = reference.start(stack, job_id)
    step3 = stack.wait_event(job_id, lambda e: e.type == "job.metrics" and e.data["step"] >= 3, 240, "step 3")
    timings = step3.data["values"]
    rollout = sum(timings.get(k) or 0.0 for k in ("timing_s/gen", "timing_s/old_log_prob", "timing_s/ref",
                                                  "timing_s/values", "timing_s/reward", "timing_s/adv"))
    update = (timings.get("timing_s/update_critic") or 0.0) + (timings.get("timing_s/update_actor") or 0.0)
    kill_at = step3.created_at + timedelta(seconds=rollout + update / 2)
    time.sleep(max(0.0, (kill_at - utcnow()).total_seconds()))

    stack.worker.kill()
    stack.worker.start()
    job = stack.wait_terminal(job_id, 240)
    assert (job.status, job.attempts, job.error) == ("succeeded", 2, None)
    assert f"killed a leftover controller of job {job_id}" in stack.worker.output()
    events = stack.events(job_id)
    lost = next(e for e in events if e.type == "job.warning" and e.data["code"] == "worker_lost")
    assert lost.data["data"]["attempt"] == 1
    resumed = Path(job_dirs(job_id)[1]).parents[2] / resumed_from(events)  # (the store root + its key)
    assert resumed.parent == Path(job_dirs(job_id)[1]) and (resumed / "COMPLETE").is_file()
    assert_step_log(events, total_steps=TOTAL_STEPS, save_freq=SAVE_FREQ, statuses=REQUEUED)
    assert_same_weights(job_id, ref)
    stack.probe.wait_all_free(30)
