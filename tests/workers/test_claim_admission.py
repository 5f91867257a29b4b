"""Admission control in the workers: the sweeper sends queued jobs fairly between projects and only as
far as the published free capacity goes (no backfill); the claim keeps a job that cannot be placed
now queued without spending an attempt, and fails one bigger than the cluster.

Each test runs over a database of its own (the sweeper reads the whole job and capacity tables)."""

from __future__ import annotations

import secrets

import pytest
from factories import add_file, add_job, events_of, get_job

from core.capacity import Admission, Node, publish
from core.config import settings
from core.db import get_engine, session_scope
from core.security import get_or_create_project
from workers import dispatch, tasks
from workers.sweeper import dispatch_pending, fair_order


@pytest.fixture
def own_database(database, monkeypatch):
    """Point every session of this process at a fresh database for the test."""
    from databases import private_database

    dbs = private_database(f"adm{secrets.token_hex(3)}")
    url = next(dbs)
    monkeypatch.setattr(settings, "DATABASE_URL", url)
    get_engine.cache_clear()  # `get_engine()` caches the default URL's engine
    yield url
    monkeypatch.undo()
    get_engine.cache_clear()
    next(dbs, None)


def project(name: str) -> str:
    with session_scope() as db:
        return get_or_create_project(db, f"{name}-{secrets.token_hex(3)}")[0].id


def cluster(cpus_total: float, cpus_free: float) -> None:
    with session_scope() as db:
        publish(db, "test", [Node("node-1", "10.0.0.1", cpus_total, cpus_free, 0, 0)])


ONE_CPU = {"num_workers": 1, "cpus_per_worker": 1}


def test_fair_order_is_round_robin_over_projects_oldest_first():
    class Row:
        def __init__(self, name: str) -> None:
            self.id, self.project_id = name, name[0]

    rows = [Row(n) for n in ("a1", "a2", "a3", "b1", "c1", "b2")]  # oldest first
    assert [r.id for r in fair_order(rows)] == ["a1", "b1", "c1", "a2", "b2", "a3"]
    # A project that already has more jobs running goes after the others.
    assert [r.id for r in fair_order(rows, {"a": 2, "b": 1})] == ["c1", "b1", "a1", "b2", "a2", "a3"]


def test_the_sweeper_shares_free_capacity_fairly_between_projects(own_database, sent):
    a, b = project("a"), project("b")
    fa, fb = add_file(a), add_file(b)
    a_jobs = [add_job(a, fa, resources=ONE_CPU) for _ in range(3)]  # project a queued first, and more
    b_jobs = [add_job(b, fb, resources=ONE_CPU) for _ in range(2)]
    cluster(cpus_total=8, cpus_free=3)
    assert dispatch_pending(max_running=10) == [a_jobs[0], b_jobs[0], a_jobs[1]]
    for job in (a_jobs[2], b_jobs[1]):  # no room left: they wait, and say why
        row = get_job(job)
        assert (row.status, row.dispatched_at, row.queue_reason) == ("queued", None, "waiting_for_resources")
    assert get_job(a_jobs[0]).queue_reason is None
    assert dispatch_pending(max_running=10) == []  # the capacity the workers publish has not changed
    cluster(cpus_total=8, cpus_free=8)  # the first jobs finished
    assert dispatch_pending(max_running=10) == [b_jobs[1], a_jobs[2]]  # b's turn comes first
    assert get_job(b_jobs[1]).queue_reason is None and get_job(a_jobs[2]).queue_reason is None


def test_no_backfill_past_a_job_that_does_not_fit(own_database, sent):
    a, b = project("a"), project("b")
    big = add_job(a, add_file(a), resources={"num_workers": 1, "cpus_per_worker": 6})
    small = add_job(b, add_file(b), resources=ONE_CPU)
    cluster(cpus_total=8, cpus_free=4)
    assert dispatch_pending(max_running=10) == []  # the big job would otherwise wait for ever
    assert get_job(small).queue_reason == "waiting_for_resources"
    cluster(cpus_total=8, cpus_free=8)
    assert dispatch_pending(max_running=10) == [big, small]


@pytest.fixture
def cluster_answers(monkeypatch):
    """The claim-time check's answer (Ray is stubbed: nothing here trains)."""
    answer = {"verdict": Admission("ok")}
    monkeypatch.setattr(tasks, "connect", lambda *a, **kw: None)
    monkeypatch.setattr(tasks, "start_publisher", lambda: None)
    monkeypatch.setattr(tasks, "claim_check", lambda job_id, spec: answer["verdict"])
    return answer


def test_a_job_the_cluster_cannot_place_now_stays_queued_without_an_attempt(own_database, cluster_answers):
    pid = project("p")
    job = add_job(pid, add_file(pid), resources={"num_workers": 1, "cpus_per_worker": 3})
    dispatch._set_dispatched(job, None, tasks.utcnow())
    cluster_answers["verdict"] = Admission("wait", "waiting_for_resources", None, "not 3 CPUs free")
    assert tasks.run_job(job) == "deferred: not 3 CPUs free"
    row = get_job(job)
    assert (row.status, row.attempts, row.dispatched_at, row.queue_reason) == (
        "queued", 0, None, "waiting_for_resources")
    assert events_of(job) == []
    cluster_answers["verdict"] = Admission("ok")  # room now: the claim clears the reason
    claim = tasks.claim_job(job)
    row = get_job(job)
    assert (claim.attempt, row.status, row.queue_reason) == (1, "running", None)


def test_a_job_bigger_than_the_cluster_fails_at_claim_without_an_attempt(own_database, cluster_answers):
    pid = project("p")
    job = add_job(pid, add_file(pid), resources={"num_workers": 1, "gpus_per_worker": 8})
    cluster_answers["verdict"] = Admission("refuse", "resources_exceed_cluster", "resources.gpus_per_worker",
                                           "the cluster has no GPU")
    assert tasks.run_job(job) == "failed: resources_exceed_cluster"
    row = get_job(job)
    assert (row.status, row.attempts) == ("failed", 0)
    assert row.error == {"code": "resources_exceed_cluster", "message": "the cluster has no GPU",
                         "param": "resources.gpus_per_worker"}
    assert [e.type for e in events_of(job)] == ["job.error", "job.status", "job.done"]
