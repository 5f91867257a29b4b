"""The outbox and the sweeper: undispatched jobs get sent (within the project limit, once even with
several sweepers), lost workers' jobs are re-queued, capped, or finish cancelling.

A sweep covers the whole table, other tests' jobs included: assertions look at this test's jobs only."""

from __future__ import annotations

import threading
from datetime import timedelta

from factories import add_file, add_job, add_running_job, events_of, get_job
from kombu.exceptions import OperationalError as BrokerDown
from sqlalchemy import update

from core.db import session_scope
from core.events import append_event
from core.models import Job, utcnow
from workers import dispatch
from workers.sweeper import dispatch_pending, recover_lost_jobs, sweep_once


def test_enqueue_marks_dispatched(project_id, sent):
    job = add_job(project_id, add_file(project_id))
    assert dispatch.enqueue_job(job) is True
    assert sent == [job] and get_job(job).dispatched_at is not None
    assert dispatch.enqueue_job(job) is True  # already sent (by a sweeper, say): not sent twice
    assert sent == [job]


def test_broker_down_leaves_the_job_in_the_outbox_for_the_sweeper(project_id, sent, monkeypatch):
    job = add_job(project_id, add_file(project_id))

    def down(job_id: str) -> None:
        raise BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    with monkeypatch.context() as m:
        m.setattr(dispatch, "_publish", down)
        assert dispatch.enqueue_job(job) is False
        assert dispatch_pending() == []  # still down: the sweep stops at the first refusal
    row = get_job(job)
    assert (row.status, row.dispatched_at) == ("queued", None)
    assert job in dispatch_pending()  # the broker is back
    assert sent.count(job) == 1 and get_job(job).dispatched_at is not None


def test_real_broker_receives_the_task(project_id, monkeypatch):
    import redis

    from core.config import settings

    # A queue no worker consumes: a session-wide celery_worker may be running on the real one.
    queue = f"{dispatch.JOB_QUEUE}.probe"
    monkeypatch.setattr(dispatch, "JOB_QUEUE", queue)
    job = add_job(project_id, add_file(project_id))
    assert dispatch.enqueue_job(job) is True
    broker = redis.Redis.from_url(settings.BROKER_URL)
    try:
        mine = [m for m in broker.lrange(queue, 0, -1) if job.encode() in m]
        assert len(mine) == 1
    finally:
        broker.delete(queue)


def test_dispatch_respects_the_project_running_limit(project_id, sent):
    f = add_file(project_id)
    running = [add_running_job(project_id, f) for _ in range(2)]
    waiting = [add_job(project_id, f) for _ in range(3)]

    def mine(sent_now: list[str]) -> list[str]:
        return [j for j in sent_now if j in waiting]

    assert mine(dispatch_pending(max_running=2)) == []
    with session_scope() as db:
        db.execute(update(Job).where(Job.id == running[0]).values(status="succeeded"))
    assert mine(dispatch_pending(max_running=2)) == [waiting[0]]  # one free slot, oldest first
    assert mine(dispatch_pending(max_running=2)) == []  # the sent one holds the slot until it runs


def test_concurrent_sweepers_send_each_job_once(project_id, sent):
    f = add_file(project_id)
    jobs = [add_job(project_id, f) for _ in range(6)]
    barrier = threading.Barrier(4)

    def sweep():
        barrier.wait()
        dispatch_pending(max_running=100)

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mine = [j for j in sent if j in jobs]
    assert len(mine) == len(set(mine))  # no job sent twice
    # Every job was claimed and sent once: by these sweepers, or by the sweeper thread of a Celery
    # worker that an earlier test left running in this session.
    assert all(get_job(j).dispatched_at is not None for j in jobs)


def test_a_job_sent_long_ago_and_never_taken_is_sent_again(project_id, sent):
    job = add_job(project_id, add_file(project_id), dispatched_at=utcnow() - timedelta(hours=1))
    assert job in dispatch_pending(redispatch_after_s=600)
    assert job not in dispatch_pending(redispatch_after_s=600)


def test_lost_worker_job_is_requeued(project_id, sent):
    f = add_file(project_id)
    lost = add_running_job(project_id, f, heartbeat_age_s=30)
    alive = add_running_job(project_id, f, heartbeat_age_s=1)
    result = sweep_once(heartbeat_timeout_s=10)
    assert lost in result.requeued and alive not in result.requeued + result.failed
    assert lost in result.dispatched  # and sent again at once (the project has a free slot)
    row = get_job(lost)
    assert (row.status, row.attempts, row.worker_id, row.heartbeat_at) == ("queued", 1, None, None)
    events = events_of(lost)
    assert [e.type for e in events] == ["job.warning", "job.status"]
    assert events[0].data["code"] == "worker_lost" and events[0].data["data"]["attempt"] == 1
    assert events[1].data == {"status": "queued"}
    assert get_job(alive).status == "running"


def test_lost_worker_after_the_last_attempt_fails_the_job(project_id, sent):
    job = add_running_job(project_id, add_file(project_id), heartbeat_age_s=30, attempts=3)
    result = recover_lost_jobs(heartbeat_timeout_s=10, max_attempts=3)
    assert job in result.failed
    row = get_job(job)
    assert row.status == "failed" and row.error["code"] == "worker_lost" and row.finished_at is not None
    assert [(e.type, e.data.get("status") or e.data.get("code")) for e in events_of(job)] == [
        ("job.error", "worker_lost"), ("job.status", "failed"), ("job.done", "failed")]


def test_cancelling_job_whose_worker_died_is_cancelled(project_id, sent):
    job = add_running_job(project_id, add_file(project_id), heartbeat_age_s=30, status="cancelling")
    assert job in recover_lost_jobs(heartbeat_timeout_s=10).cancelled
    assert get_job(job).status == "cancelled"
    assert [e.data for e in events_of(job)] == [{"status": "cancelled"}, {"status": "cancelled"}]


def test_request_cancel_finishes_a_job_no_worker_runs(project_id):
    f = add_file(project_id)
    idle = add_job(project_id, f, status="cancelling")
    running = add_running_job(project_id, f, status="cancelling")
    assert dispatch.request_cancel(idle) is True
    assert get_job(idle).status == "cancelled"
    assert dispatch.request_cancel(running) is False  # its worker stops it
    assert get_job(running).status == "cancelling"


def test_pausing_job_whose_worker_died_is_paused_not_requeued(project_id, sent):
    job = add_running_job(project_id, add_file(project_id), heartbeat_age_s=30, status="pausing")
    result = recover_lost_jobs(heartbeat_timeout_s=10)
    assert job in result.paused and job not in result.requeued + result.failed
    row = get_job(job)
    assert (row.status, row.worker_id, row.heartbeat_at, row.dispatched_at) == ("paused", None, None, None)
    assert [(e.type, e.data) for e in events_of(job)] == [("job.status", {"status": "paused"})]
    assert job not in sweep_once(heartbeat_timeout_s=10).dispatched  # a paused job is never sent


def test_request_pause_pauses_a_job_no_worker_runs(project_id):
    f = add_file(project_id)
    idle = add_job(project_id, f, status="pausing")
    running = add_running_job(project_id, f, status="pausing")
    assert dispatch.request_pause(idle) is True
    assert get_job(idle).status == "paused"
    assert dispatch.request_pause(running) is False  # its worker checkpoints and pauses it
    assert get_job(running).status == "pausing"


def _status_events(job_id: str, statuses: list[str]) -> None:
    with session_scope() as db:
        for status in statuses:
            append_event(db, job_id, "job.status", {"status": status}, commit=False)


def test_attempts_that_ended_in_a_pause_are_not_lost_attempts(project_id, sent):
    """Three attempts, two of them paused and resumed: a lost worker now is the first loss, re-queued."""
    job = add_running_job(project_id, add_file(project_id), heartbeat_age_s=30, attempts=3)
    _status_events(job, ["running", "pausing", "paused", "queued", "running", "pausing", "paused", "queued",
                         "running"])
    assert job in recover_lost_jobs(heartbeat_timeout_s=10, max_attempts=3).requeued
    # A queued job paused spent no attempt: with one pause of that kind, attempt 3 lost is the last.
    other = add_running_job(project_id, add_file(project_id), heartbeat_age_s=30, attempts=3)
    _status_events(other, ["paused", "queued", "running"])
    assert other in recover_lost_jobs(heartbeat_timeout_s=10, max_attempts=3).failed


def test_several_sweepers_requeue_a_lost_job_once(project_id, sent):
    job = add_running_job(project_id, add_file(project_id), heartbeat_age_s=30)
    barrier = threading.Barrier(3)
    results = []

    def sweep():
        barrier.wait()
        results.append(recover_lost_jobs(heartbeat_timeout_s=10))

    threads = [threading.Thread(target=sweep) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.requeued.count(job) for r in results) == 1
    assert [e.type for e in events_of(job)] == ["job.warning", "job.status"]
