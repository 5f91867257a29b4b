"""Liveness on the database's clock: heartbeats are written as the database's now() and judged
against it, so a worker or sweeper whose wall clock is an hour off changes nothing; the controller's
own beat gates the worker's; after losing the database, the sweeper waits one timeout before it
judges heartbeats again."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from factories import add_file, add_running_job, get_job
from sqlalchemy import update
from sqlalchemy.exc import OperationalError

from core import models
from core.clock import db_now
from core.config import settings
from core.db import session_scope
from core.models import Job
from workers import dispatch, reporter, sweeper, tasks
from workers.reporter import DBReporter, Heartbeat
from workers.sweeper import Sweeper, recover_lost_jobs


def now_on_db() -> datetime:
    with session_scope() as db:
        return db_now(db)


def age_heartbeat(job_id: str, seconds: float, column=Job.heartbeat_at) -> None:
    with session_scope() as db:
        db.execute(update(Job).where(Job.id == job_id).values({column: db_now(db) - timedelta(seconds=seconds)}))


@pytest.mark.parametrize("skew_s", [3600.0, -3600.0])
def test_a_skewed_host_clock_changes_nothing(project_id, monkeypatch, skew_s):
    def skewed() -> datetime:
        return datetime.now(UTC) + timedelta(seconds=skew_s)

    for module in (models, reporter, sweeper, tasks, dispatch):  # every host-clock reader of the workers
        monkeypatch.setattr(module, "utcnow", skewed, raising=False)
    job = add_running_job(project_id, add_file(project_id))
    assert Heartbeat(job, 1, 1.0, on_lost=lambda: None).beat()
    beat = get_job(job).heartbeat_at
    assert abs((now_on_db() - beat.replace(tzinfo=beat.tzinfo or UTC)).total_seconds()) < 5
    assert job not in recover_lost_jobs(heartbeat_timeout_s=60).requeued  # fresh, whatever this host says
    age_heartbeat(job, 120)
    assert job in recover_lost_jobs(heartbeat_timeout_s=60).requeued  # stale, whatever this host says


def test_the_controllers_beat_gates_the_workers(project_id):
    job = add_running_job(project_id, add_file(project_id))
    controller = DBReporter(job, settings.database_url, attempt=1, heartbeat_s=0.0)
    controller.heartbeat(3)
    assert get_job(job).controller_heartbeat_at is not None
    DBReporter(job, settings.database_url, attempt=2, heartbeat_s=0.0).heartbeat()  # a stale attempt: dropped
    worker = Heartbeat(job, 1, 1.0, on_lost=lambda: None, controller_timeout_s=60)
    age_heartbeat(job, 30)
    assert worker.beat() and (now_on_db() - get_job(job).heartbeat_at).total_seconds() < 5
    # The controller froze: the worker process is alive, but the job's heartbeat is withheld ...
    age_heartbeat(job, 120, Job.controller_heartbeat_at)
    age_heartbeat(job, 30)
    assert worker.beat()  # still this attempt's job: nothing to stop here
    assert (now_on_db() - get_job(job).heartbeat_at).total_seconds() > 25
    assert job not in recover_lost_jobs(heartbeat_timeout_s=60).requeued
    age_heartbeat(job, 70)
    assert job in recover_lost_jobs(heartbeat_timeout_s=60).requeued  # ... so a sweeper re-queues it
    assert get_job(job).controller_heartbeat_at is None  # the next attempt's controller starts afresh


def test_controller_heartbeats_are_throttled(project_id):
    job = add_running_job(project_id, add_file(project_id))
    controller = DBReporter(job, settings.database_url, attempt=1, heartbeat_s=3600.0)
    controller.heartbeat()
    first = get_job(job).controller_heartbeat_at
    age_heartbeat(job, 10, Job.controller_heartbeat_at)
    controller.heartbeat()  # within heartbeat_s: not written
    assert get_job(job).controller_heartbeat_at < first


def test_after_a_database_outage_the_sweeper_waits_one_timeout(project_id, monkeypatch):
    job = add_running_job(project_id, add_file(project_id))
    age_heartbeat(job, 10)  # older than the timeout below: its worker could not beat during the outage
    sweep = Sweeper(heartbeat_timeout_s=2.0)

    def unreachable(db):
        raise OperationalError("SELECT now()", {}, ConnectionRefusedError("connection refused"))

    with monkeypatch.context() as m:
        m.setattr(sweeper, "db_now", unreachable)
        assert sweep.sweep() is None
    result = sweep.sweep()  # back: heartbeats are not judged yet
    assert result is not None and job not in result.requeued and get_job(job).status == "running"
    time.sleep(2.2)
    assert job in sweep.sweep().requeued  # a timeout later, a job nobody beats for is lost after all


def test_without_an_outage_the_sweeper_judges_at_once(project_id):
    job = add_running_job(project_id, add_file(project_id))
    age_heartbeat(job, 10)
    assert job in Sweeper(heartbeat_timeout_s=2.0).sweep().requeued
