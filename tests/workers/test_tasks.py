"""The Celery task's bookkeeping, called in-process (no broker; Ray's `connect` stubbed, as nothing
here reaches training): it asserts the world first, respects the project limit without blocking, and
records failures that happen before training."""

from __future__ import annotations

import pytest
from factories import add_file, add_job, add_running_job, events_of, get_job
from sqlalchemy import update

from core.capacity import Admission
from core.db import session_scope
from core.models import Job, utcnow
from workers import tasks
from workers.tasks import claim_job, output_model_name, run_job


@pytest.fixture(autouse=True)
def no_ray(monkeypatch):
    """Nothing here reaches Ray: joining it, publishing its capacity and the claim-time capacity
    check (a cluster with room) are stubbed."""
    monkeypatch.setattr(tasks, "connect", lambda *a, **kw: None)
    monkeypatch.setattr(tasks, "start_publisher", lambda: None)
    monkeypatch.setattr(tasks, "claim_check", lambda job_id, spec: Admission("ok"))


def test_ray_unreachable_leaves_the_job_queued_without_spending_an_attempt(project_id, monkeypatch):
    def unreachable(*a, **kw):
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6379")

    monkeypatch.setattr(tasks, "connect", unreachable)
    job = add_job(project_id, add_file(project_id), dispatched_at=utcnow())
    assert run_job(job) == "deferred: the Ray cluster is unreachable"
    row = get_job(job)
    assert (row.status, row.attempts, row.dispatched_at) == ("queued", 0, None)


def test_project_at_its_limit_leaves_the_job_queued_for_the_sweeper(project_id):
    f = add_file(project_id)
    for _ in range(2):  # settings.MAX_RUNNING_JOBS_PER_PROJECT
        add_running_job(project_id, f)
    job = add_job(project_id, f, dispatched_at=utcnow())
    assert run_job(job).startswith("deferred")
    row = get_job(job)
    assert (row.status, row.attempts, row.dispatched_at) == ("queued", 0, None)
    assert events_of(job) == []


def test_redelivered_or_duplicate_messages_change_nothing(project_id):
    f = add_file(project_id)
    done = add_job(project_id, f, status="succeeded")
    running = add_running_job(project_id, f)
    assert run_job(done) == "already succeeded"
    assert run_job(running) == "running"
    assert run_job("job-doesnotexist") == "no such job"
    assert get_job(running).attempts == 1 and events_of(running) == [] and events_of(done) == []


def test_a_cancelling_job_nobody_runs_is_cancelled_instead_of_started(project_id):
    job = add_job(project_id, add_file(project_id), status="cancelling")
    assert run_job(job) == "cancelled before it started"
    assert get_job(job).status == "cancelled"


def test_claim_starts_an_attempt(project_id):
    job = add_job(project_id, add_file(project_id), attempts=1)  # re-queued once already
    claim = claim_job(job)
    row = get_job(job)
    assert (claim.attempt, row.status, row.attempts, row.worker_id) == (2, "running", 2, claim.worker_id)
    assert row.heartbeat_at is not None and row.started_at is not None
    assert [e.data for e in events_of(job)] == [{"status": "running"}]
    assert claim_job(job) == "running"


def test_a_missing_reference_fails_the_job_with_a_user_error(project_id):
    job = add_job(project_id, add_file(project_id), model="model-doesnotexist")
    assert run_job(job) == "failed: invalid_reference"
    row = get_job(job)
    assert row.status == "failed" and row.attempts == 1 and row.finished_at is not None
    assert row.error == {"code": "invalid_reference", "message": "model: model model-doesnotexist no longer exists",
                         "param": "model"}
    assert [(e.type, e.data) for e in events_of(job)] == [
        ("job.status", {"status": "running"}),
        ("job.error", row.error),
        ("job.status", {"status": "failed"}),
        ("job.done", {"status": "failed"}),
    ]


def test_bad_hyperparameters_fail_with_their_dotted_path(project_id):
    job = add_job(project_id, add_file(project_id), hyperparameters={"trainer": {"total_epochs": 0}})
    assert run_job(job) == "failed: invalid_config"
    assert get_job(job).error["param"] == "trainer.total_epochs"


def test_terminal_states_are_never_left(project_id):
    job = add_job(project_id, add_file(project_id), model="model-doesnotexist")
    run_job(job)
    with session_scope() as db:
        db.execute(update(Job).where(Job.id == job).values(dispatched_at=None))
    assert run_job(job) == "already failed"
    assert get_job(job).status == "failed"


def test_a_paused_attempt_releases_the_job_and_a_cancel_meanwhile_wins(project_id):
    f = add_file(project_id)
    job = add_running_job(project_id, f, status="pausing")
    claim = tasks.Claim(job, 1, "test:1:abc")  # the factory's worker and attempt
    assert tasks.finish_paused(tasks.Claim(job, 2, "test:1:abc"), 3).startswith("stopped")  # another attempt's
    assert tasks.finish_paused(claim, 3) == "paused"
    row = get_job(job)
    assert (row.status, row.worker_id, row.heartbeat_at, row.dispatched_at, row.finished_at) == (
        "paused", None, None, None, None)
    assert [(e.type, e.data) for e in events_of(job)] == [
        ("job.status", {"status": "paused"}),
        ("job.log", {"message": "paused after step 3; a resume continues from its newest checkpoint"})]
    cancelled = add_running_job(project_id, f, status="cancelling")  # cancelled while it was pausing
    assert tasks.finish_paused(tasks.Claim(cancelled, 1, "test:1:abc"), 3) == "cancelled"
    assert [e.data for e in events_of(cancelled)] == [{"status": "cancelled"}, {"status": "cancelled"}]


def test_output_model_name(project_id):
    f = add_file(project_id)
    with session_scope() as db:
        job = db.get(Job, add_job(project_id, f, model="Qwen/Qwen2.5-0.5B", suffix="polite"))
        assert output_model_name(db, job) == "Qwen2.5-0.5B:polite"
        job = db.get(Job, add_job(project_id, f, model="/models/llama/", method="sft"))
        assert output_model_name(db, job) == "llama:sft"
