"""A job's events over HTTP: pages, metric series, and the SSE stream (replay, resume, live through
Redis and through the DB poller, gaps, keep-alives, closing). Events are appended with
core.events.append_event, as the worker does; streams are read from a real uvicorn on loopback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from serving import serve
from sqlalchemy import update

from core import events as core_events
from core.events import append_event
from core.models import File, Job

TIMEOUT = 10.0


def make_job(db, project_id: str, status: str = "running") -> str:
    f = File(project_id=project_id, purpose="preference", filename="p.parquet", bytes=1, sha256=str(time.time_ns()),
             format="parquet", storage_key="files/x")
    db.add(f)
    db.flush()
    job = Job(project_id=project_id, status=status, method="reward_model", model="org/name", training_file_id=f.id,
              spec={"method": {"type": "reward_model"}})
    db.add(job)
    db.commit()
    return job.id


def finish(db, job_id: str, status: str = "succeeded") -> None:
    db.execute(update(Job).where(Job.id == job_id).values(status=status, finished_at=datetime.now(UTC)))
    append_event(db, job_id, "job.status", {"status": status})
    append_event(db, job_id, "job.done", {"status": status})


@pytest.fixture
def job(db, project_key) -> str:
    return make_job(db, project_key[0])


# --- pages and metrics ------------------------------------------------------------------------------

def test_events_page_after_a_seq_cursor(client, auth, db, job):
    for i in range(5):
        append_event(db, job, "job.log", {"message": f"line {i}"})
    page = client.get(f"/v1/jobs/{job}/events?limit=2", headers=auth).json()
    assert page["object"] == "list" and page["has_more"] and page["last_seq"] == 2
    assert [(e["seq"], e["type"], e["data"]) for e in page["data"]] == [
        (1, "job.log", {"message": "line 0"}), (2, "job.log", {"message": "line 1"})]
    assert page["data"][0]["object"] == "job.event" and isinstance(page["data"][0]["created_at"], int)
    rest = client.get(f"/v1/jobs/{job}/events?after=2&limit=10", headers=auth).json()
    assert [e["seq"] for e in rest["data"]] == [3, 4, 5] and not rest["has_more"] and rest["last_seq"] == 5
    empty = client.get(f"/v1/jobs/{job}/events?after=5", headers=auth).json()
    assert empty["data"] == [] and empty["last_seq"] is None
    assert client.get(f"/v1/jobs/{job}/events?after=-1", headers=auth).json()["param"] == "after"


def test_metrics_are_series_per_name(client, auth, db, job):
    for step in range(1, 4):
        append_event(db, job, "job.metrics", {"step": step, "values": {"actor/pg_loss": -0.1 * step,
                                                                       "critic/vf_loss": float(step)},
                                              "total_steps": 3, "epoch": 0})
    append_event(db, job, "job.log", {"message": "not a metric"})
    append_event(db, job, "job.metrics", {"step": 2, "values": {"actor/pg_loss": -9.0}})  # a re-run step: latest wins
    body = client.get(f"/v1/jobs/{job}/metrics", headers=auth).json()
    assert body["object"] == "job.metrics" and body["job_id"] == job
    series = {s["name"]: s for s in body["data"]}
    assert series["actor/pg_loss"]["steps"] == [1, 2, 3]
    assert series["actor/pg_loss"]["values"] == pytest.approx([-0.1, -9.0, -0.3])
    assert series["critic/vf_loss"] == {"name": "critic/vf_loss", "steps": [1, 2, 3], "values": [1.0, 2.0, 3.0],
                                        "points": 3}
    only = client.get(f"/v1/jobs/{job}/metrics?names=critic/vf_loss", headers=auth).json()["data"]
    assert [s["name"] for s in only] == ["critic/vf_loss"]
    both = client.get(f"/v1/jobs/{job}/metrics?names=critic/vf_loss,actor/pg_loss&names=nope", headers=auth)
    assert [s["name"] for s in both.json()["data"]] == ["actor/pg_loss", "critic/vf_loss"]


def test_long_series_are_downsampled_keeping_the_ends(client, auth, db, job):
    from core.models import JobEvent

    db.add_all(JobEvent(job_id=job, seq=s, type="job.metrics", data={"step": s, "values": {"loss": float(s)}})
               for s in range(1, 1201))
    db.execute(update(Job).where(Job.id == job).values(last_event_seq=1200))
    db.commit()
    s = client.get(f"/v1/jobs/{job}/metrics?max_points=100", headers=auth).json()["data"][0]
    assert s["points"] == 1200 and len(s["steps"]) == 100
    assert s["steps"][0] == 1 and s["steps"][-1] == 1200 and s["steps"] == sorted(s["steps"])
    assert s["values"] == [float(x) for x in s["steps"]]
    assert len(client.get(f"/v1/jobs/{job}/metrics", headers=auth).json()["data"][0]["steps"]) == 500


# --- SSE ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fast_streams():
    from api import streams

    saved = streams.RECONCILE_INTERVAL_S, streams.POLL_INTERVAL_S, streams.TERMINAL_GRACE_S
    streams.RECONCILE_INTERVAL_S, streams.POLL_INTERVAL_S, streams.TERMINAL_GRACE_S = 0.5, 0.1, 0.5
    yield streams
    streams.RECONCILE_INTERVAL_S, streams.POLL_INTERVAL_S, streams.TERMINAL_GRACE_S = saved


@pytest.fixture(scope="module")
def live(app, fast_streams) -> Iterator[str]:
    with serve(app) as url:
        yield url


class Stream:
    """An SSE connection read line by line on a background thread, so tests can act while it is open."""

    def __init__(self, url: str, path: str, headers: dict[str, str]) -> None:
        self.events: list[dict] = []
        self.comments: list[str] = []
        self.closed = threading.Event()
        self.opened = threading.Event()
        self.status: int | None = None
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._run, args=(url, path, headers), daemon=True)
        self._thread.start()
        assert self.opened.wait(TIMEOUT), "no response"

    def _run(self, url, path, headers):
        try:
            with httpx.Client(base_url=url, timeout=httpx.Timeout(TIMEOUT * 3)) as http, \
                    http.stream("GET", path, headers=headers) as r:
                self.status, self.content_type = r.status_code, r.headers.get("content-type", "")
                self.opened.set()
                fields: dict[str, str] = {}
                for line in r.iter_lines():
                    if line.startswith(":"):
                        self.comments.append(line)
                    elif line == "":
                        if fields:
                            self.events.append({"id": fields.get("id"), "event": fields.get("event"),
                                                "data": json.loads(fields["data"])})
                        fields = {}
                    else:
                        name, _, value = line.partition(": ")
                        fields[name] = value
        except httpx.HTTPError as exc:  # a stream still open when the test server stops
            self.error = exc
        finally:
            self.opened.set()
            self.closed.set()

    def wait_for(self, n: int) -> list[dict]:
        deadline = time.monotonic() + TIMEOUT
        while len(self.events) < n:
            assert time.monotonic() < deadline, f"got {len(self.events)} events, wanted {n}: {self.events}"
            time.sleep(0.01)
        return self.events

    @property
    def seqs(self) -> list[int]:
        return [e["data"]["seq"] for e in self.events]


def subscribed(job_id: str, n: int = 1) -> None:
    """Wait until the server's hub has `n` subscribers for the job (in-process: same module)."""
    from api import streams

    deadline = time.monotonic() + TIMEOUT
    while sum(h.subscriber_count(job_id) for h in list(streams._hubs.values())) < n:
        assert time.monotonic() < deadline, "the stream never subscribed"
        time.sleep(0.01)


def test_stream_replays_then_closes_after_job_done(live, auth, db, job):
    append_event(db, job, "job.log", {"message": "hello"})
    append_event(db, job, "job.metrics", {"step": 1, "values": {"loss": 1.0}, "total_steps": 2, "epoch": 0})
    finish(db, job)
    s = Stream(live, f"/v1/jobs/{job}/events/stream", auth)
    assert s.status == 200 and s.content_type.startswith("text/event-stream")
    assert s.closed.wait(TIMEOUT), "the stream of a finished job must close after replaying job.done"
    assert [(e["id"], e["event"]) for e in s.events] == [
        ("1", "job.log"), ("2", "job.metrics"), ("3", "job.status"), ("4", "job.done")]
    first = s.events[0]["data"]
    assert first == {"object": "job.event", "seq": 1, "type": "job.log", "data": {"message": "hello"},
                     "created_at": first["created_at"]} and isinstance(first["created_at"], int)


def test_stream_resumes_after_last_event_id_without_gap_or_repeat(live, auth, db, job):
    for i in range(6):
        append_event(db, job, "job.log", {"message": str(i)})
    finish(db, job)  # seq 7, 8
    by_header = Stream(live, f"/v1/jobs/{job}/events/stream", {**auth, "Last-Event-ID": "4"})
    assert by_header.closed.wait(TIMEOUT)
    assert by_header.seqs == [5, 6, 7, 8]
    by_query = Stream(live, f"/v1/jobs/{job}/events/stream?after=6", auth)
    assert by_query.closed.wait(TIMEOUT) and by_query.seqs == [7, 8]
    both = Stream(live, f"/v1/jobs/{job}/events/stream?after=1", {**auth, "Last-Event-ID": "5"})  # header wins
    assert both.closed.wait(TIMEOUT) and both.seqs == [6, 7, 8]
    # Resuming after job.done: nothing left, the stream ends at once.
    done = Stream(live, f"/v1/jobs/{job}/events/stream", {**auth, "Last-Event-ID": "8"})
    assert done.closed.wait(TIMEOUT) and done.events == []
    bad = httpx.get(f"{live}/v1/jobs/{job}/events/stream", headers={**auth, "Last-Event-ID": "x"})
    assert (bad.status_code, bad.json()["param"]) == (422, "Last-Event-ID")


def test_live_events_arrive_through_redis_to_every_subscriber(live, auth, db, job, fast_streams, monkeypatch):
    monkeypatch.setattr(fast_streams, "_read_new", lambda seen: [])  # no reconciler: Redis only
    append_event(db, job, "job.status", {"status": "running"})
    a = Stream(live, f"/v1/jobs/{job}/events/stream", auth)
    b = Stream(live, f"/v1/jobs/{job}/events/stream", {**auth, "Last-Event-ID": "1"})
    a.wait_for(1)
    subscribed(job, 2)
    hub = next(h for h in fast_streams._hubs.values() if h.subscriber_count(job))
    assert hub.redis and hub._ready.is_set()
    for step in range(1, 4):
        append_event(db, job, "job.metrics", {"step": step, "values": {"loss": 1.0 / step}})
    assert [e["event"] for e in a.wait_for(4)] == ["job.status", "job.metrics", "job.metrics", "job.metrics"]
    assert not a.closed.is_set()
    finish(db, job)
    assert a.closed.wait(TIMEOUT) and b.closed.wait(TIMEOUT)
    assert a.seqs == [1, 2, 3, 4, 5, 6] and b.seqs == [2, 3, 4, 5, 6]
    assert a.events[-1]["event"] == "job.done" and a.events[-1]["data"]["data"] == {"status": "succeeded"}


def test_a_gap_is_filled_from_the_database(live, auth, db, job, monkeypatch):
    s = Stream(live, f"/v1/jobs/{job}/events/stream", auth)
    subscribed(job)
    publish = core_events.publish
    monkeypatch.setattr(core_events, "publish", lambda event: None)
    append_event(db, job, "job.log", {"message": "never published"})  # seq 1: lost in transit
    monkeypatch.setattr(core_events, "publish", publish)
    append_event(db, job, "job.log", {"message": "published"})         # seq 2: reveals the gap
    assert [e["data"]["data"]["message"] for e in s.wait_for(2)] == ["never published", "published"]
    monkeypatch.setattr(core_events, "publish", lambda event: None)
    finish(db, job)  # the last publishes are lost too: the reconciler delivers them
    assert s.closed.wait(TIMEOUT)
    assert s.seqs == [1, 2, 3, 4]


def test_live_events_without_redis_come_from_one_shared_poller(app, auth, db, job, fast_streams, monkeypatch):
    from core.config import settings

    monkeypatch.setattr(settings, "REDIS_URL", "")  # no publish, and the new server's hub polls
    with serve(app) as url:
        a = Stream(url, f"/v1/jobs/{job}/events/stream", auth)
        b = Stream(url, f"/v1/jobs/{job}/events/stream", auth)
        subscribed(job, 2)
        hub = next(h for h in fast_streams._hubs.values() if h.subscriber_count(job))
        assert not hub.redis and len(hub._tasks) == 1  # one poller task for all subscribers
        append_event(db, job, "job.log", {"message": "polled"})
        assert a.wait_for(1)[0]["data"]["data"] == {"message": "polled"}
        finish(db, job)
        assert a.closed.wait(TIMEOUT) and b.closed.wait(TIMEOUT)
        assert a.seqs == b.seqs == [1, 2, 3]


def test_a_client_that_leaves_is_unsubscribed(live, auth, db, job):
    append_event(db, job, "job.log", {"message": "hi"})
    with httpx.Client(base_url=live, timeout=TIMEOUT) as http, \
            http.stream("GET", f"/v1/jobs/{job}/events/stream", headers=auth) as r:
        assert next(r.iter_lines()).startswith("event: job.log")
        subscribed(job)
    deadline = time.monotonic() + TIMEOUT
    from api import streams

    while sum(h.subscriber_count(job) for h in list(streams._hubs.values())):
        assert time.monotonic() < deadline, "the subscription outlived its client"
        time.sleep(0.02)


def test_keep_alive_comments_while_idle(live, auth, job, monkeypatch):
    import fastapi.routing

    monkeypatch.setattr(fastapi.routing, "_PING_INTERVAL", 0.1)
    s = Stream(live, f"/v1/jobs/{job}/events/stream", auth)
    deadline = time.monotonic() + TIMEOUT
    while not s.comments:
        assert time.monotonic() < deadline, "no keep-alive"
        time.sleep(0.02)
    assert s.comments[0] == ": ping" and s.events == []


def test_a_finished_job_without_job_done_closes_after_a_grace(live, auth, db, project_key):
    job = make_job(db, project_key[0], status="failed")
    append_event(db, job, "job.error", {"code": "lost", "message": "worker lost"})
    s = Stream(live, f"/v1/jobs/{job}/events/stream", auth)
    assert s.closed.wait(TIMEOUT) and s.seqs == [1]


def test_stream_is_declared_as_event_stream_in_openapi(app):
    op = app.openapi()["paths"]["/v1/jobs/{job_id}/events/stream"]["get"]
    assert op["operationId"] == "stream_job_events"
    content = op["responses"]["200"]["content"]
    assert list(content) == ["text/event-stream"]
    assert content["text/event-stream"]["itemSchema"]["properties"]["data"]["contentSchema"] == {
        "$ref": "#/components/schemas/JobEventPublic"}


def test_streams_of_other_projects_jobs_are_404(live, other_auth, job):
    r = httpx.get(f"{live}/v1/jobs/{job}/events/stream", headers=other_auth)
    assert (r.status_code, r.json()["code"]) == (404, "not_found")
