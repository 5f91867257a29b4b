"""The API process restarts (gracefully, then by a crash) while SSE clients follow a job.

The events come from a writer in the test (as the worker's reporter writes them: committed, then
published), so the stream outlives both restarts whatever the machine's speed. Every client must
reconnect with `Last-Event-ID` and end with exactly the job's events: no gap, no repeat.
"""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest
import redis
from fault_processes import wait_until
from sqlalchemy import update
from sse_followers import Follower

from core.events import append_event, channel, event_payload
from core.ids import new_id
from core.models import Job, utcnow

pytestmark = [pytest.mark.faults, pytest.mark.slow]

EVENT_INTERVAL_S = 0.1
MAX_EVENTS = 2000


class Writer(threading.Thread):
    """Plays a running job's worker: a metrics event every `EVENT_INTERVAL_S` (with a heartbeat, so
    the stack's sweeper leaves the job alone) until told to finish, then `succeeded` + `job.done`."""

    def __init__(self, stack, job_id: str) -> None:
        super().__init__(daemon=True, name="keel-fake-worker")
        self.stack, self.job_id = stack, job_id
        self.finish = threading.Event()
        self.error: BaseException | None = None
        self.redis = redis.Redis(port=stack.redis.port, socket_timeout=2)

    def _append(self, kind: str, data: dict, **values) -> None:
        with self.stack.session() as db:
            if values:
                db.execute(update(Job).where(Job.id == self.job_id).values(**values))
            event = append_event(db, self.job_id, kind, data, commit=False)
            db.commit()
        self.redis.publish(channel(self.job_id), json.dumps(event_payload(event)))

    def run(self) -> None:
        try:
            step = 0
            while not self.finish.is_set() and step < MAX_EVENTS:
                step += 1
                self._append("job.metrics", {"step": step, "values": {"train/loss": 1.0 / step}}, heartbeat_at=utcnow())
                time.sleep(EVENT_INTERVAL_S)
            self._append("job.status", {"status": "succeeded"}, status="succeeded", finished_at=utcnow())
            self._append("job.done", {"status": "succeeded"})
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def running_job(stack) -> str:
    """A job row in `running`, its first event written, as a worker that just claimed it leaves it."""
    job_id = new_id("job")
    spec = {"model": stack.assets["model"], "training_file": stack.files["sft"], "method": {"type": "sft"},
            "seed": 0, "resources": {"num_workers": 1}}
    with stack.session() as db:
        now = utcnow()
        db.add(Job(id=job_id, project_id=stack.project_id, method="sft", spec=spec, model=spec["model"],
                   training_file_id=stack.files["sft"], status="running", attempts=1, worker_id="test:0:writer",
                   started_at=now, dispatched_at=now, heartbeat_at=now))
        db.commit()
        append_event(db, job_id, "job.status", {"status": "running"})
    return job_id


def test_sse_clients_resume_without_gap_across_api_restarts(stack):
    job_id = running_job(stack)
    writer = Writer(stack, job_id)
    followers = [Follower(stack, job_id, timeout_s=120) for _ in range(3)]
    writer.start()
    for follower in followers:
        follower.start()
    try:
        wait_until(lambda: all(len(f.seqs) >= 10 for f in followers), 30, what="the clients to be streaming")
        restarts = []
        for crash in (False, True):
            if crash:
                stack.api.kill()  # SIGKILL: connections die without a goodbye
            else:
                stack.api.signal(signal.SIGTERM)  # graceful: uvicorn closes the streams (after 2 s at most)
                stack.api.proc.wait(30)
            stack.api.start()
            restarts.append(time.monotonic())
            with stack.session() as db:
                before = db.get(Job, job_id).last_event_seq  # written while the API was away, or earlier
            wait_until(lambda before=before: all(f.seqs[-1] > before for f in followers), 60,
                       what="every client to be streaming again")
    finally:
        writer.finish.set()
        writer.join(30)
    assert writer.error is None, writer.error

    with stack.session() as db:
        last_seq = db.get(Job, job_id).last_event_seq
    for follower in followers:
        follower.join(60)
        assert follower.error is None, follower.error
        assert follower.seqs == list(range(1, last_seq + 1))  # no gap, no repeat, in order
        for restarted_at in restarts:
            assert follower.received_at[0] < restarted_at < follower.received_at[-1]
