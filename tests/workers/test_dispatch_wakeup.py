"""A running sweeper sends a new job as soon as its commit notifies (`workers.wakeup`), long before its
periodic pass; a job that keeps coming back (a broker that refuses it) is not retried in a tight loop;
without the listener (SQLite) it looks for new jobs every `WAKEUP_GAP_S`.

The broker is replaced by a recorder (these jobs are not meant to run). A sweep covers the whole table:
assertions look at this test's jobs only."""

from __future__ import annotations

import time

from factories import add_file, add_job, get_job

from workers import dispatch, sweeper
from workers.sweeper import WAKEUP_GAP_S, Sweeper


def _running(interval_s: float) -> Sweeper:
    s = Sweeper(interval_s=interval_s)
    s.start()
    if s.wakeup is not None:
        assert s.wakeup.listening.wait(10), "the listener did not subscribe"
    return s


def _until(predicate, timeout: float) -> float | None:
    """Seconds until `predicate()` held, or None."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def test_a_new_job_is_sent_when_its_commit_notifies(project_id, sent):
    s = _running(interval_s=600)  # its one periodic pass is the first one, at start
    try:
        time.sleep(0.5)
        job = add_job(project_id, add_file(project_id))
        took = _until(lambda: job in sent, timeout=10)
        assert took is not None and took < 5, took
        assert get_job(job).dispatched_at is not None and sent.count(job) == 1
    finally:
        s.stop()


def test_a_refused_job_is_retried_at_most_once_per_gap(project_id, monkeypatch):
    attempts: list[str] = []

    def refuse(job_id: str) -> None:
        attempts.append(job_id)
        raise ConnectionError("broker down")

    monkeypatch.setattr(dispatch, "_publish", refuse)
    s = _running(interval_s=600)
    try:
        job = add_job(project_id, add_file(project_id))  # every refusal un-claims it, which notifies again
        assert _until(lambda: job in attempts, timeout=10) is not None
        time.sleep(1.5)
        assert 2 <= attempts.count(job) <= 1.5 / WAKEUP_GAP_S + 2, attempts.count(job)
        assert get_job(job).dispatched_at is None  # still in the outbox
    finally:
        s.stop()


def test_a_failing_pass_waits_its_interval(monkeypatch):
    calls: list[float] = []

    def failing(**_):
        calls.append(time.monotonic())
        raise RuntimeError("a bug in a pass")

    monkeypatch.setattr(sweeper, "sweep_once", failing)
    s = _running(interval_s=0.5)
    try:
        time.sleep(1.2)
    finally:
        s.stop()
    assert 2 <= len(calls) <= 4, len(calls)  # logged and retried every 0.5 s, not in a tight loop


def test_without_the_listener_it_looks_every_gap(project_id, sent, monkeypatch):
    monkeypatch.setattr(sweeper, "for_database", lambda on_notify: None)  # as on SQLite
    s = _running(interval_s=600)
    try:
        time.sleep(0.5)
        job = add_job(project_id, add_file(project_id))
        took = _until(lambda: job in sent, timeout=10)
        assert took is not None and took < 5, took
    finally:
        s.stop()
