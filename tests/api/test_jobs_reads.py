"""Jobs read over HTTP: list pages and filters, queue positions, what a create and a retrieve show."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from core.models import Job
from tests.api.job_requests import create, rm_body

# --- list, retrieve, queue position --------------------------------------------------------------

def test_list_pages_newest_first_and_filters_by_status(client, auth, other_auth, db, files, dispatched):
    ids = [create(client, auth, rm_body(files)).json()["id"] for _ in range(3)]
    page = client.get("/v1/jobs?limit=2", headers=auth).json()
    assert page["object"] == "list" and [j["id"] for j in page["data"]] == ids[::-1][:2]
    assert page["has_more"] and page["first_id"] == ids[2] and page["last_id"] == ids[1]
    rest = client.get(f"/v1/jobs?limit=2&after={page['last_id']}", headers=auth).json()
    assert [j["id"] for j in rest["data"]] == [ids[0]] and not rest["has_more"]
    db.execute(update(Job).where(Job.id == ids[1]).values(status="running", started_at=datetime.now(UTC)))
    db.commit()
    running = client.get("/v1/jobs?status=running", headers=auth).json()["data"]
    assert [j["id"] for j in running] == [ids[1]]
    assert [j["id"] for j in client.get("/v1/jobs?status=queued", headers=auth).json()["data"]] == [ids[2], ids[0]]
    bad = client.get("/v1/jobs?status=sleeping", headers=auth)
    assert (bad.status_code, bad.json()["param"]) == (422, "status")
    assert client.get("/v1/jobs", headers=other_auth).json()["data"] == []


def test_queue_position_counts_this_projects_queued_jobs_oldest_first(client, auth, db, files, dispatched):
    created = [create(client, auth, rm_body(files)).json() for _ in range(3)]
    ids = [j["id"] for j in created]
    assert [j["queue_position"] for j in created] == [1, 2, 3]  # the insert's own count
    positions = {j["id"]: j["queue_position"] for j in client.get("/v1/jobs", headers=auth).json()["data"]}
    assert [positions[i] for i in ids] == [1, 2, 3]
    db.execute(update(Job).where(Job.id == ids[0]).values(status="running"))
    db.commit()
    assert client.get(f"/v1/jobs/{ids[0]}", headers=auth).json()["queue_position"] is None
    assert client.get(f"/v1/jobs/{ids[2]}", headers=auth).json()["queue_position"] == 2
    assert create(client, auth, rm_body(files)).json()["queue_position"] == 3  # behind the two still queued


def test_a_create_answers_what_a_retrieve_of_the_stored_row_shows(client, auth, db, files, dispatched):
    """The create's answer is built from the values it inserted, not from the stored row: the two agree."""
    body = {**rm_body(files), "metadata": {"team": "align"}, "seed": 7, "suffix": "x"}
    created = create(client, auth, body).json()
    assert created == client.get(f"/v1/jobs/{created['id']}", headers=auth).json()
    row = db.get(Job, created["id"])
    assert (row.progress, row.latest_metrics, row.attempts, row.last_event_seq) == ({}, {}, 0, 0)
    assert row.created_at is not None and int(row.created_at.timestamp()) == created["created_at"]


def test_retrieve_shows_what_the_worker_wrote(client, auth, db, files, dispatched):
    job_id = create(client, auth, rm_body(files)).json()["id"]
    started = datetime.now(UTC) - timedelta(seconds=100)
    db.execute(update(Job).where(Job.id == job_id).values(
        status="running", started_at=started, attempts=1,
        progress={"step": 25, "total_steps": 100, "epoch": 0, "seconds_remaining": None},
        latest_metrics={"actor/pg_loss": -0.12, "critic/vf_loss": 0.5}))
    db.commit()
    job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert job["status"] == "running" and job["started_at"] == int(started.timestamp()) and job["attempts"] == 1
    assert job["latest_metrics"] == {"actor/pg_loss": -0.12, "critic/vf_loss": 0.5}
    assert job["progress"]["step"] == 25 and job["progress"]["total_steps"] == 100
    assert 250 <= job["progress"]["seconds_remaining"] <= 330  # 100 s for 25 steps -> ~300 s for 75
    db.execute(update(Job).where(Job.id == job_id).values(
        status="failed", finished_at=datetime.now(UTC), error={"code": "diverged", "message": "KL too high"}))
    db.commit()
    job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert job["error"] == {"code": "diverged", "message": "KL too high", "param": None, "error_id": None}
