"""Cancelling a running job in any phase gives every Ray resource back, and the next job runs.

PPO is cancelled as a step's generation starts (right after the previous step's metrics) and as its
update starts (after the rollout time the previous step took); SFT, which trains inside the job's
controller actor, mid-training. Each time the job ends `cancelled` within seconds, its controller is
gone and every CPU of the cluster is free again.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from core.models import utcnow
from engine.runtime.jobs import actor_name

pytestmark = [pytest.mark.faults, pytest.mark.slow]

ROLLOUT_TIMINGS = ("timing_s/gen", "timing_s/old_log_prob", "timing_s/ref", "timing_s/values", "timing_s/reward",
                   "timing_s/adv")


def cancel_and_check_freed(stack, job_id: str) -> None:
    total, free = stack.probe.cpus()
    assert free < total, "the job should hold Ray CPUs while it runs"
    stack.cancel(job_id)
    cancelled_at = time.monotonic()
    job = stack.wait_terminal(job_id, 30)
    assert job.status == "cancelled" and time.monotonic() - cancelled_at < 15
    events = stack.events(job_id)
    assert [e.data["status"] for e in events if e.type == "job.status"] == ["running", "cancelling", "cancelled"]
    assert [(e.type, e.data) for e in events[-2:]] == [("job.status", {"status": "cancelled"}),
                                                        ("job.done", {"status": "cancelled"})]
    assert not stack.probe.actor_alive(actor_name(job_id))
    stack.probe.wait_all_free(15)


@pytest.mark.parametrize("phase", ["generation", "update"])
def test_cancelling_ppo_frees_ray(stack, phase):
    job_id = stack.create_ppo_job()
    step = stack.wait_event(job_id, lambda e: e.type == "job.metrics", 240, "the first step")
    if phase == "update":
        rollout = sum(step.data["values"].get(k) or 0.0 for k in ROLLOUT_TIMINGS)
        time.sleep(max(0.0, (step.created_at + timedelta(seconds=rollout) - utcnow()).total_seconds()))
    cancel_and_check_freed(stack, job_id)


def test_cancelling_sft_frees_ray_and_the_next_job_runs(stack):
    job_id = stack.create_sft_job(5000)
    stack.wait_event(job_id, lambda e: e.type == "job.metrics", 180, "the first step")
    cancel_and_check_freed(stack, job_id)

    next_job = stack.create_sft_job(2)
    assert stack.wait_terminal(next_job, 120).status == "succeeded"
    stack.probe.wait_all_free(15)
