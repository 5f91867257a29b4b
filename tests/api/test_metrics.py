"""`GET /metrics`: Prometheus text (parsed with prometheus_client's parser) with requests by route
template, latency, open event streams, and jobs by status and queue depth read from the database;
no project names or job ids anywhere; optionally behind a bearer token."""

from __future__ import annotations

import time
from datetime import timedelta

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from core.config import settings
from core.events import append_event
from core.models import Job, Project, utcnow
from tests.api import job_requests


def scrape(get) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}}."""
    r = get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _value(metrics, name, **labels) -> float:
    return metrics.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


def _job(db, project_id: str, **columns) -> str:
    job = Job(project_id=project_id, method="sft", spec={"method": {"type": "sft"}}, model="org/name",
              training_file_id=job_requests.make_file(db, project_id, "sft"), **columns)
    db.add(job)
    db.commit()
    return job.id


def test_requests_are_counted_by_route_template_never_by_path(client, auth, db, project_key):
    job = _job(db, project_key[0], status="succeeded")
    before = scrape(client.get)
    for _ in range(3):
        assert client.get(f"/v1/jobs/{job}", headers=auth).status_code == 200
    assert client.get("/v1/jobs/job-doesnotexist", headers=auth).status_code == 404
    assert client.get("/nowhere/at/all").status_code == 404
    after = scrape(client.get)
    route = "/v1/jobs/{job_id}"
    total = "keel_http_requests_total"
    assert _value(after, total, method="GET", route=route, status="200") - \
        _value(before, total, method="GET", route=route, status="200") == 3
    assert _value(after, total, method="GET", route=route, status="404") - \
        _value(before, total, method="GET", route=route, status="404") == 1
    assert _value(after, total, method="GET", route="unmatched", status="404") >= 1
    count = "keel_http_request_duration_seconds_count"
    assert _value(after, count, method="GET", route=route) - _value(before, count, method="GET", route=route) == 4
    assert _value(after, "keel_http_request_duration_seconds_bucket", method="GET", route=route, le="+Inf") >= 4
    text = client.get("/metrics").text
    project_name = db.get(Project, project_key[0]).name
    assert job not in text and project_key[0] not in text and project_name not in text and "nowhere" not in text


def test_jobs_by_status_and_the_queue_come_from_the_database(client, db, project_key):
    before = scrape(client.get)
    old = utcnow() - timedelta(hours=2)
    _job(db, project_key[0], status="queued", created_at=old)
    _job(db, project_key[0], status="queued", queue_reason="waiting_for_resources")
    _job(db, project_key[0], status="running")
    _job(db, project_key[0], status="failed")
    after = scrape(client.get)
    for status, added in [("queued", 2), ("running", 1), ("failed", 1), ("succeeded", 0), ("cancelling", 0)]:
        assert _value(after, "keel_jobs", status=status) - _value(before, "keel_jobs", status=status) == added, status
    assert _value(after, "keel_queue_depth", reason="none") - _value(before, "keel_queue_depth", reason="none") == 1
    assert _value(after, "keel_queue_depth", reason="waiting_for_resources") - \
        _value(before, "keel_queue_depth", reason="waiting_for_resources") == 1
    assert _value(after, "keel_queue_oldest_age_seconds") >= 2 * 3600 - 60
    assert _value(after, "keel_database_up") == 1
    db.execute(update(Job).where(Job.project_id == project_key[0]).values(status="cancelled"))
    db.commit()


def test_open_event_streams_are_a_gauge(live_server, auth, db, project_key):
    job = _job(db, project_key[0], status="queued")
    get = lambda path: httpx.get(live_server + path, timeout=10)
    base = _value(scrape(get), "keel_sse_connections")
    with httpx.Client(timeout=10) as http:
        streams = [http.send(http.build_request("GET", f"{live_server}/v1/jobs/{job}/events/stream", headers=auth),
                             stream=True) for _ in range(2)]
        assert [s.status_code for s in streams] == [200, 200]
        assert _value(scrape(get), "keel_sse_connections") == base + 2
        db.execute(update(Job).where(Job.id == job).values(status="succeeded"))
        append_event(db, job, "job.done", {"status": "succeeded"})
        for s in streams:
            s.read()
            s.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _value(scrape(get), "keel_sse_connections") != base:
        time.sleep(0.1)
    assert _value(scrape(get), "keel_sse_connections") == base


def test_a_metrics_token_guards_the_scrape(client, monkeypatch):
    assert client.get("/metrics").status_code == 200  # open by default, like /healthz
    monkeypatch.setattr(settings, "METRICS_TOKEN", "s3cret-token")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-token"}):
        r = client.get("/metrics", headers=headers)
        assert r.status_code == 401 and r.json()["code"] == "unauthorized" and "keel_" not in r.text
    r = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
    assert r.status_code == 200 and "keel_http_requests_total" in r.text


@pytest.mark.parametrize("broken", ["postgresql+psycopg://nobody@127.0.0.1:1/none"])
def test_a_scrape_answers_when_the_database_does_not(client, monkeypatch, broken):
    from api import metrics
    from core.db import session_factory

    monkeypatch.setattr(metrics, "session_factory", lambda: session_factory(broken))
    after = scrape(client.get)
    assert _value(after, "keel_database_up") == 0 and "keel_jobs" not in after
    assert "keel_http_requests_total" in after
