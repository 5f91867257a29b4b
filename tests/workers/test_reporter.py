"""The DB reporter: events with gap-free seq, progress, checkpoint rows, fencing, retries, stop."""

from __future__ import annotations

import pickle
import threading

import pytest
from factories import add_file, add_running_job, events_of, get_job, wait_for
from sqlalchemy import create_engine, select, text, update
from sqlalchemy.exc import OperationalError

from core.config import settings
from core.db import session_scope
from core.models import Checkpoint, Job
from workers.reporter import DBReporter, Heartbeat


@pytest.fixture
def running_job(project_id) -> str:
    return add_running_job(project_id, add_file(project_id))


def _reporter(job_id: str, attempt: int | None = 1, **kw) -> DBReporter:
    return DBReporter(job_id, settings.database_url, redis_url=settings.REDIS_URL, attempt=attempt, **kw)


def test_events_progress_and_checkpoints(running_job, tmp_path):
    r = _reporter(running_job)
    ckpt = tmp_path / "step_2"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"x" * 1000)
    (ckpt / "COMPLETE").write_text("")
    r.log("starting")
    r.metrics(1, {"train/loss": 2.0}, total_steps=3, epoch=0)
    r.metrics(2, {"train/loss": 1.5}, total_steps=3, epoch=0)
    r.checkpoint(2, str(ckpt), {"train/loss": 1.5})
    r.warning("kl_high", "KL above 0.2", {"kl": 0.25})
    r.metrics(3, {"train/loss": float("nan"), "train/lr": 1e-3}, total_steps=3, epoch=1)

    events = events_of(running_job)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events] == ["job.log", "job.metrics", "job.metrics", "job.checkpoint", "job.warning",
                                        "job.metrics"]
    assert events[0].data == {"message": "starting"}
    assert events[1].data == {"step": 1, "values": {"train/loss": 2.0}, "total_steps": 3, "epoch": 0}
    assert events[4].data == {"code": "kl_high", "message": "KL above 0.2", "data": {"kl": 0.25}}
    assert events[5].data["values"] == {"train/loss": None, "train/lr": 1e-3}  # NaN: null in JSON

    with session_scope() as db:
        row = db.scalar(select(Checkpoint).where(Checkpoint.job_id == running_job))
        job = db.get(Job, running_job)
    assert (row.step, row.path, row.bytes, row.metrics) == (2, str(ckpt), 1000, {"train/loss": 1.5})
    assert events[3].data == {"checkpoint_id": row.id, "step": 2, "metrics": {"train/loss": 1.5}}
    assert job.progress["step"] == 3 and job.progress["total_steps"] == 3 and job.progress["epoch"] == 1
    assert job.progress["seconds_remaining"] == 0.0
    assert job.latest_metrics == {"train/loss": None, "train/lr": 1e-3}
    assert job.last_event_seq == len(events)


def test_seconds_remaining_follows_the_step_rate(running_job):
    r = _reporter(running_job)
    assert r._seconds_remaining(1, 11, now=100.0) is None
    assert r._seconds_remaining(2, 11, now=110.0) == 90.0  # 10 s a step, 9 to go
    assert r._seconds_remaining(4, 11, now=130.0) == 70.0  # 30 s for 3 steps, 7 to go
    assert r._seconds_remaining(11, 11, now=200.0) == 0.0


def test_replayed_steps_and_stale_attempts_are_dropped(running_job):
    r = _reporter(running_job)
    for step in (1, 2, 3):
        r.metrics(step, {"loss": 1.0}, total_steps=5)
    r.metrics(3, {"loss": 9.0}, total_steps=5)  # a resume from the step-2 checkpoint re-runs step 3
    stale = _reporter(running_job, attempt=0)  # an earlier attempt's zombie controller
    stale.metrics(4, {"loss": 1.0}, total_steps=5)
    stale.log("late")
    r.metrics(4, {"loss": 0.5}, total_steps=5)
    assert [e.data["step"] for e in events_of(running_job)] == [1, 2, 3, 4]
    assert get_job(running_job).latest_metrics == {"loss": 0.5}


def test_retry_after_a_lost_commit_answer_writes_once(running_job, monkeypatch):
    """The commit lands but the connection breaks before the answer: the retry must not repeat it."""
    r = _reporter(running_job)
    calls = []
    real = DBReporter._publish

    def flaky(self, event):
        calls.append(event.seq)
        if len(calls) == 1:
            raise OperationalError("COMMIT", {}, ConnectionError("server closed the connection"))
        real(self, event)

    monkeypatch.setattr(DBReporter, "_publish", flaky)
    r.log("once")
    assert [e.data for e in events_of(running_job)] == [{"message": "once"}]
    assert calls == [1]


def test_writes_survive_postgres_dropping_every_connection(running_job):
    r = _reporter(running_job)
    r.log("before")
    admin = create_engine(settings.database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()"))
    admin.dispose()
    r.log("after")
    assert [e.data["message"] for e in events_of(running_job)] == ["before", "after"]


def test_should_stop(running_job):
    r = _reporter(running_job, stop_cache_s=0)
    assert r.should_stop() is False
    with session_scope() as db:
        db.execute(update(Job).where(Job.id == running_job).values(status="cancelling"))
    assert r.should_stop() is True
    with session_scope() as db:  # re-queued after a lost worker and started again: attempt 2
        db.execute(update(Job).where(Job.id == running_job).values(status="running", attempts=2))
    assert r.should_stop() is True
    assert _reporter(running_job, attempt=2, stop_cache_s=0).should_stop() is False
    local = _reporter(running_job, attempt=2, stop_cache_s=0)
    stop = threading.Event()
    local.bind_stop_event(stop)
    stop.set()
    assert local.should_stop() is True


def test_should_pause(running_job):
    r = _reporter(running_job, stop_cache_s=0)
    assert (r.should_pause(), r.should_stop()) == (False, False)
    with session_scope() as db:
        db.execute(update(Job).where(Job.id == running_job).values(status="pausing"))
    # A pause is not a stop: the loop checkpoints, and the job stays this attempt's (heartbeats too).
    assert (r.should_pause(), r.should_stop()) == (True, False)
    assert Heartbeat(running_job, 1, 1.0, on_lost=lambda: None).beat() is True
    with session_scope() as db:  # cancelled while pausing: stop wins
        db.execute(update(Job).where(Job.id == running_job).values(status="cancelling"))
    assert (r.should_pause(), r.should_stop()) == (False, True)
    with session_scope() as db:  # paused (by a sweeper): no longer this attempt's to run
        db.execute(update(Job).where(Job.id == running_job).values(status="paused"))
    assert (r.should_pause(), r.should_stop()) == (False, True)


def test_should_stop_is_cached(running_job):
    r = _reporter(running_job, stop_cache_s=60)
    assert r.should_stop() is False
    with session_scope() as db:
        db.execute(update(Job).where(Job.id == running_job).values(status="cancelling"))
    assert r.should_stop() is False


def test_pickles_without_its_connections(running_job):
    r = _reporter(running_job)
    r.bind_stop_event(threading.Event())
    r.log("used")
    copy = pickle.loads(pickle.dumps(r))
    assert (copy.job_id, copy.attempt, copy.database_url) == (running_job, 1, settings.database_url)
    assert copy._local_stop is None
    copy.log("from a copy")
    assert [e.data["message"] for e in events_of(running_job)] == ["used", "from a copy"]


def test_heartbeat_beats_and_reports_a_lost_job(running_job):
    lost = threading.Event()
    before = get_job(running_job).heartbeat_at
    with Heartbeat(running_job, 1, 0.05, on_lost=lost.set):
        wait_for(lambda: get_job(running_job).heartbeat_at > before, 5, what="a heartbeat")
        with session_scope() as db:  # the sweeper re-queued it
            db.execute(update(Job).where(Job.id == running_job).values(status="queued"))
        wait_for(lost.is_set, 5, what="on_lost")


def test_json_safe_text_with_a_nul_is_stored(running_job):
    """PostgreSQL's JSONB refuses NUL in a string (a sampled token can decode to one): `json_safe` turns
    it into U+FFFD, so the row is written instead of failing its transaction."""
    from workers.reporter import json_safe

    value = {"text\x00key": ["a\x00b", 1.5, float("nan")]}
    safe = json_safe(value)
    assert safe == {"text\ufffdkey": ["a\ufffdb", 1.5, None]}
    with session_scope() as db:
        db.execute(update(Job).where(Job.id == running_job).values(result_files=[safe]))
    with session_scope() as db:
        assert db.scalar(select(Job.result_files).where(Job.id == running_job)) == [safe]
        with pytest.raises(Exception, match="0000"):  # what it guards against
            db.execute(update(Job).where(Job.id == running_job).values(result_files=[value]))
