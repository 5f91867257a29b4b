"""PostgreSQL goes away for a few seconds in the middle of a job.

The shared PostgreSQL is never stopped: the API and the worker (and the job's Ray controller, which
inherits the worker's database URL) reach it through `PgProxy`, which resets every connection and
refuses new ones for the outage. Shorter than the heartbeat timeout, so the job is not re-queued.
"""

from __future__ import annotations

import time

import pytest
from fault_processes import wait_until
from fault_stack import HEARTBEAT_TIMEOUT_S, assert_step_log, sft_hyperparameters
from sse_followers import Follower

pytestmark = [pytest.mark.faults, pytest.mark.slow]

OUTAGE_S = 3.0
STEPS, SAVE_FREQ = 14, 4


def job_count(stack) -> int:
    from sqlalchemy import func, select

    from core.models import Job

    with stack.session() as db:
        return db.scalar(select(func.count()).select_from(Job).where(Job.project_id == stack.project_id))


def test_postgres_outage_gets_503_with_retry_after_and_everything_recovers_on_its_own(stack):
    assert OUTAGE_S < HEARTBEAT_TIMEOUT_S - 1.5
    job_id = stack.create_sft_job(STEPS, SAVE_FREQ)
    follower = Follower(stack, job_id)
    follower.start()
    stack.wait_event(job_id, lambda e: e.type == "job.metrics" and e.data["step"] >= 2, 180, "step 2")
    refused_before, jobs_before = stack.proxy.refused, job_count(stack)
    retried = {"model": stack.assets["model"], "training_file": stack.files["sft"],
               "method": {"type": "sft", "hyperparameters": sft_hyperparameters(1)}}
    idempotency = {"Idempotency-Key": f"faults-{job_id}"}

    stack.proxy.outage()
    answers = []
    with stack.http(timeout=10) as http:
        try:
            deadline = time.monotonic() + OUTAGE_S
            answers.append(http.post("/v1/jobs", json=retried, headers=idempotency))
            while time.monotonic() < deadline:
                answers.append(http.get(f"/v1/jobs/{job_id}"))
                time.sleep(0.3)
            ready = http.get("/readyz")
        finally:
            stack.proxy.restore()

        assert {r.status_code for r in answers} == {503}, [(r.status_code, r.text) for r in answers]
        for r in answers:
            assert r.headers["Retry-After"] == "5"
            assert r.headers["content-type"].startswith("application/problem+json")
            assert r.json()["code"] == "database_unavailable"
        assert ready.status_code == 503 and ready.json()["param"] == "database"
        assert stack.proxy.refused > refused_before  # the workers and the API really were cut off

        # Nobody does anything: the API answers again, the job finishes.
        wait_until(lambda: http.get(f"/v1/jobs/{job_id}").status_code == 200, 15, interval=0.3,
                   what="the API to answer again")
        # The client retries its refused POST with the same Idempotency-Key: one job, however often.
        first, again = (http.post("/v1/jobs", json=retried, headers=idempotency) for _ in range(2))
        assert (first.status_code, again.status_code, again.headers.get("Idempotent-Replayed")) == (201, 201, "true")
        assert first.json()["id"] == again.json()["id"] and job_count(stack) == jobs_before + 1
        stack.cancel(first.json()["id"])
    job = stack.wait_terminal(job_id, 180)
    assert (job.status, job.attempts, job.error) == ("succeeded", 1, None)

    # The writes that met the outage (metrics, heartbeats) were retried: every step is in the log
    # once, nothing was written twice, and the job never looked lost.
    events = stack.events(job_id)
    assert_step_log(events, total_steps=STEPS, save_freq=SAVE_FREQ, statuses=["running", "succeeded"])
    assert not [e for e in events if e.type == "job.warning"]
    assert "heartbeat failed" in stack.worker.output()
    # A client that streamed the job's events through the outage got every one of them, once.
    follower.join(60)
    assert follower.error is None, follower.error
    assert follower.seqs == [e.seq for e in events]
