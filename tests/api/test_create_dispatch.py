"""A create never talks to the broker: the job is committed queued with `dispatched_at` null, and the
commit wakes the dispatchers (the workers' sweepers) with PostgreSQL's `NOTIFY keel_dispatch`
(migration 0007, `workers.wakeup`). Resume still claims and sends the job itself."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import update
from sqlalchemy.engine import make_url

from core.db import get_engine
from core.models import Job
from tests.api import job_requests
from workers import dispatch
from workers.wakeup import CHANNEL


def _files(db, project_key) -> dict[str, str]:
    return {p: job_requests.make_file(db, project_key[0], p) for p in ("sft", "preference", "prompts")}


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    """What would be published, and no real publish."""
    published: list[str] = []
    monkeypatch.setattr(dispatch, "_publish", published.append)
    return published


@pytest.fixture
def listener():
    """A connection LISTENing on the dispatchers' channel, as `workers.wakeup` does."""
    url = make_url(get_engine().url.render_as_string(hide_password=False)).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        yield conn


def _notified(conn, timeout: float) -> int:
    return sum(1 for _ in conn.notifies(timeout=timeout))


def test_a_create_leaves_the_job_to_the_dispatchers_and_wakes_them(client, auth, db, project_key, sent, listener):
    r = job_requests.create(client, auth, job_requests.rm_body(_files(db, project_key)))
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert sent == []  # nothing published by the API
    db.expire_all()
    assert (db.get(Job, job_id).status, db.get(Job, job_id).dispatched_at) == ("queued", None)
    assert _notified(listener, 2.0) >= 1


def test_the_wakeup_is_for_queued_jobs_nobody_sent(db, project_key, listener):
    job = Job(project_id=project_key[0], status="queued", method="sft", spec={"method": {"type": "sft"}},
              model="org/name", training_file_id=job_requests.make_file(db, project_key[0], "sft"))
    db.add(job)
    db.commit()
    assert _notified(listener, 1.0) == 1
    for values, wakes in (({"dispatched_at": Job.created_at}, 0),  # sent (claimed): nothing to wake for
                          ({"status": "running"}, 0),
                          ({"status": "queued", "dispatched_at": None}, 1),  # re-queued, or a refused publish
                          ({"queue_reason": "waiting_for_resources"}, 0)):  # not a column it watches
        db.execute(update(Job).where(Job.id == job.id).values(**values))
        db.commit()
        assert _notified(listener, 0.5) == wakes, values


def test_enqueue_outside_a_create_claims_first(db, project_key, sent, monkeypatch):
    """Resume sends the row it queued itself: `enqueue_job` claims it, then publishes."""
    claims: list[tuple] = []
    real = dispatch._set_dispatched
    monkeypatch.setattr(dispatch, "_set_dispatched",
                        lambda job_id, expect, value: claims.append((job_id, expect, value)) or real(job_id, expect, value))
    file_id = job_requests.make_file(db, project_key[0], "sft")
    job = Job(project_id=project_key[0], status="queued", method="sft", spec={"method": {"type": "sft"}},
              model="org/name", training_file_id=file_id)
    db.add(job)
    db.commit()
    assert dispatch.enqueue_job(job.id) is True
    assert sent == [job.id] and len(claims) == 1 and claims[0][1] is None
