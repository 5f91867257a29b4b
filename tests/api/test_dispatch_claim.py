"""A job created over HTTP is claimed for dispatch in its own insert (`workers.dispatch.claimed`):
published once, with no claim UPDATE of its own; a refused publish undoes the claim so the sweeper
sends the job later. The broker itself is replaced by a recorder (nothing is really sent)."""

from __future__ import annotations

import pytest
import test_jobs

from core.models import Job
from workers import dispatch


def _files(db, project_key) -> dict[str, str]:
    return {p: test_jobs.make_file(db, project_key[0], p) for p in ("sft", "preference", "prompts")}


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    """What the API published, and no real publish."""
    published: list[str] = []
    monkeypatch.setattr(dispatch, "_publish", published.append)
    return published


@pytest.fixture
def claims(monkeypatch) -> list[tuple]:
    """Every conditional `dispatched_at` update (claims and un-claims)."""
    seen: list[tuple] = []
    real = dispatch._set_dispatched
    monkeypatch.setattr(dispatch, "_set_dispatched",
                        lambda job_id, expect, value: seen.append((job_id, expect, value)) or real(job_id, expect, value))
    return seen


def test_a_created_job_is_claimed_in_its_insert_and_published_once(client, auth, db, project_key, sent, claims):
    r = test_jobs.create(client, auth, test_jobs.rm_body(_files(db, project_key)))
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert sent == [job_id]
    assert claims == []  # no UPDATE + commit of its own
    db.expire_all()
    assert db.get(Job, job_id).dispatched_at is not None


def test_a_refused_publish_undoes_the_claim(client, auth, db, project_key, claims, monkeypatch):
    def refuse(job_id):
        raise ConnectionError("broker down")

    monkeypatch.setattr(dispatch, "_publish", refuse)
    r = test_jobs.create(client, auth, test_jobs.rm_body(_files(db, project_key)))
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert len(claims) == 1 and claims[0][0] == job_id and claims[0][2] is None  # the un-claim
    db.expire_all()
    row = db.get(Job, job_id)
    assert (row.status, row.dispatched_at) == ("queued", None)  # the sweeper sends it


def test_enqueue_outside_a_create_still_claims_first(db, project_key, sent, claims):
    """Resume and the sweeper send rows nobody claimed: `enqueue_job` claims them itself."""
    file_id = test_jobs.make_file(db, project_key[0], "sft")
    job = Job(project_id=project_key[0], status="queued", method="sft", spec={"method": {"type": "sft"}},
              model="org/name", training_file_id=file_id)
    db.add(job)
    db.commit()
    assert dispatch.enqueue_job(job.id) is True
    assert sent == [job.id] and len(claims) == 1 and claims[0][1] is None
