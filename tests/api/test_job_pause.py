"""Pause and resume over HTTP, Keel's routes and OpenAI's: state changes, events, what is sent to
the workers, wrong-state errors with code and param, cancel of a paused job. No worker: the
dispatcher is replaced by a recorder (the real run: tests/workers/test_pause_e2e.py)."""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy import select, update

from core.models import File, Job, JobEvent


@pytest.fixture
def dispatched(monkeypatch):
    """Calls the API made into workers.dispatch: [(name, job_id)]."""
    from workers import dispatch

    calls: list[tuple[str, str]] = []
    for name in ("enqueue_job", "request_cancel", "request_pause"):
        monkeypatch.setattr(dispatch, name, lambda job_id, name=name: calls.append((name, job_id)) or False)
    return calls


@pytest.fixture
def job(client, auth, db, project_key, dispatched) -> str:
    """A queued reward-model job of the caller's project."""
    f = File(project_id=project_key[0], purpose="preference", filename="p.parquet", bytes=10,
             sha256=secrets.token_hex(32), format="parquet", storage_key=f"files/{secrets.token_hex(4)}")
    db.add(f)
    db.commit()
    body = {"model": "org/name", "training_file": f.id, "method": {"type": "reward_model", "hyperparameters": {
        "data": {"train_batch_size": 16, "max_length": 256}, "trainer": {"total_training_steps": 10}}}}
    r = client.post("/v1/jobs", json=body, headers=auth)
    assert r.status_code == 201, r.text
    dispatched.clear()
    return r.json()["id"]


def _set(db, job_id: str, **values) -> None:
    db.execute(update(Job).where(Job.id == job_id).values(**values))
    db.commit()


def _statuses(db, job_id: str) -> list[str]:
    db.expire_all()
    return [e.data["status"] for e in db.scalars(select(JobEvent).where(JobEvent.job_id == job_id,
                                                                         JobEvent.type == "job.status")
                                                  .order_by(JobEvent.seq))]


def test_pause_a_running_job_then_resume_it(client, auth, db, job, dispatched):
    _set(db, job, status="running", worker_id="w:1", attempts=1)
    r = client.post(f"/v1/jobs/{job}/pause", headers=auth)
    assert (r.status_code, r.json()["status"]) == (200, "pausing"), r.text
    assert dispatched == [("request_pause", job)]
    again = client.post(f"/v1/jobs/{job}/pause", headers=auth)  # already pausing: unchanged, nothing sent
    assert (again.status_code, again.json()["status"]) == (200, "pausing")
    early = client.post(f"/v1/jobs/{job}/resume", headers=auth)
    assert (early.status_code, early.json()["code"], early.json()["param"]) == (409, "job_not_paused", "job_id")
    assert "still saving its checkpoint" in early.json()["detail"]
    assert _statuses(db, job) == ["pausing"] and dispatched == [("request_pause", job)]

    _set(db, job, status="paused", worker_id=None)  # what the worker does once the checkpoint is saved
    assert client.post(f"/v1/jobs/{job}/pause", headers=auth).json()["status"] == "paused"
    r = client.post(f"/v1/jobs/{job}/resume", headers=auth)
    assert (r.status_code, r.json()["status"]) == (200, "queued"), r.text
    assert r.json()["queue_position"] == 1
    assert dispatched[-1] == ("enqueue_job", job)
    db.expire_all()
    assert db.get(Job, job).dispatched_at is None  # sent afresh (the recorder sent nothing)
    assert _statuses(db, job) == ["pausing", "queued"]


def test_a_queued_job_pauses_at_once_and_resumes(client, auth, db, job, dispatched):
    r = client.post(f"/v1/jobs/{job}/pause", headers=auth)
    assert (r.status_code, r.json()["status"], r.json()["queue_position"]) == (200, "paused", None)
    assert dispatched == []  # nothing to checkpoint, no worker to tell
    assert client.get("/v1/jobs", params={"status": "paused"}, headers=auth).json()["data"][0]["id"] == job
    assert client.post(f"/v1/jobs/{job}/resume", headers=auth).json()["status"] == "queued"
    assert dispatched == [("enqueue_job", job)]
    assert _statuses(db, job) == ["paused", "queued"]


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled", "cancelling"])
def test_pausing_a_job_that_is_not_running_is_a_409(client, auth, db, job, dispatched, status):
    _set(db, job, status=status)
    r = client.post(f"/v1/jobs/{job}/pause", headers=auth)
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (409, "job_not_running", "job_id"), r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    db.expire_all()
    assert db.get(Job, job).status == status and _statuses(db, job) == [] and dispatched == []


@pytest.mark.parametrize("status", ["queued", "running", "succeeded", "cancelled"])
def test_resuming_a_job_that_is_not_paused_is_a_409(client, auth, db, job, dispatched, status):
    _set(db, job, status=status)
    r = client.post(f"/v1/jobs/{job}/resume", headers=auth)
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (409, "job_not_paused", "job_id"), r.text
    db.expire_all()
    assert db.get(Job, job).status == status and dispatched == []


def test_cancel_a_paused_or_pausing_job(client, auth, db, job, dispatched):
    _set(db, job, status="paused")
    r = client.post(f"/v1/jobs/{job}/cancel", headers=auth)
    assert (r.json()["status"], r.json()["finished_at"] is not None) == ("cancelled", True)
    _set(db, job, status="pausing", finished_at=None)
    assert client.post(f"/v1/jobs/{job}/cancel", headers=auth).json()["status"] == "cancelling"
    assert ("request_cancel", job) in dispatched


def test_pause_replays_an_idempotency_key(client, auth, job):
    key = {"Idempotency-Key": f"p-{secrets.token_hex(4)}"}
    first = client.post(f"/v1/jobs/{job}/pause", headers={**auth, **key})
    second = client.post(f"/v1/jobs/{job}/pause", headers={**auth, **key})
    assert first.status_code == second.status_code == 200 and first.json() == second.json()


def test_openai_routes_pause_and_resume_with_openai_errors(client, auth, db, job, dispatched):
    _set(db, job, status="running", worker_id="w:1", attempts=1)
    r = client.post(f"/v1/fine_tuning/jobs/{job}/pause", headers=auth)
    assert r.status_code == 200, r.text
    # OpenAI has no `pausing`: it reads `running` until the checkpoint is saved.
    assert (r.json()["object"], r.json()["status"]) == ("fine_tuning.job", "running")
    assert dispatched == [("request_pause", job)]
    bad = client.post(f"/v1/fine_tuning/jobs/{job}/resume", headers=auth)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "job_not_paused"
    assert bad.json()["error"]["param"] == "job_id"
    _set(db, job, status="paused")
    assert client.get(f"/v1/fine_tuning/jobs/{job}", headers=auth).json()["status"] == "paused"
    assert client.post(f"/v1/fine_tuning/jobs/{job}/resume", headers=auth).json()["status"] == "queued"
    _set(db, job, status="succeeded")
    bad = client.post(f"/v1/fine_tuning/jobs/{job}/pause", headers=auth)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "job_not_running"


def test_a_paused_job_keeps_its_files(client, auth, db, job):
    training = db.scalar(select(Job.training_file_id).where(Job.id == job))
    _set(db, job, status="paused")
    r = client.delete(f"/v1/files/{training}", headers=auth)
    assert (r.status_code, r.json()["code"]) == (409, "file_in_use")
