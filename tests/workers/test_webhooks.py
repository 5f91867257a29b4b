"""Webhooks: the routes, and delivery from the worker side (`workers.webhooks`) to a real receiver on
loopback that fails the first attempts: signatures verify with the Standard Webhooks reference
library, retries follow the backoff schedule, the delivery log tells what happened, and several
senders at once never send a message twice. Private addresses are refused at creation and at delivery."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from standardwebhooks.webhooks import Webhook as Verifier
from standardwebhooks.webhooks import WebhookVerificationError

from core.config import settings
from core.db import session_scope
from core.events import append_event
from tests.workers.factories import add_file, add_job, wait_for
from workers import webhooks as sender_mod
from workers.webhooks import WebhookSender


class Receiver:
    """An HTTP server thread on loopback answering each POST with the next of `codes` (the last repeats)."""

    def __init__(self, codes: list[int], delay_s: float = 0.0) -> None:
        self.codes = list(codes)
        self.requests: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                time.sleep(delay_s)
                code = receiver.codes[min(len(receiver.requests), len(receiver.codes) - 1)]
                receiver.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body,
                                          "at": time.monotonic(), "code": code})
                self.send_response(code)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def resolver(monkeypatch):
    """DNS (outside the code) answering from a table: `resolver({"name": "address"})`; IP literals
    resolve to themselves, other names fail. Returns the names looked up."""
    import socket

    real = socket.getaddrinfo
    looked_up: list[str] = []
    table: dict[str, str] = {}

    def getaddrinfo(host, port, *args, **kwargs):
        import ipaddress

        try:
            ipaddress.ip_address(host)
            return real(host, port, *args, **kwargs)
        except ValueError:
            looked_up.append(host)
            if host not in table:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None
            return real(table[host], port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    def answer(entries: dict[str, str]) -> list[str]:
        table.clear()
        table.update(entries)
        return looked_up

    return answer


@pytest.fixture
def senders():
    started: list[WebhookSender] = []

    def start(n: int = 1) -> list[WebhookSender]:
        for _ in range(n):
            thread = WebhookSender(interval_s=0.05)
            thread.start()
            started.append(thread)
        return started

    yield start
    for thread in started:
        thread.stop()


def finished_job(project_id: str) -> str:
    """A job row already finished (so no worker runs it), for events appended by the test."""
    return add_job(project_id, add_file(project_id), status="succeeded")


def emit(job_id: str, type: str, data: dict) -> None:
    with session_scope() as db:
        append_event(db, job_id, type, data)


def create(client, auth, url: str, **body) -> dict:
    r = client.post("/v1/webhooks", headers=auth, json={"url": url, **body})
    assert r.status_code == 201, r.text
    return r.json()


# --- routes -------------------------------------------------------------------------------------------

def test_secret_is_shown_once_and_routes_are_per_project(client, auth, other_auth):
    created = create(client, auth, "http://127.0.0.1:9/hook", event_types=["job.failed"])
    assert created["secret"].startswith("whsec_") and created["event_types"] == ["job.failed"]
    one = client.get(f"/v1/webhooks/{created['id']}", headers=auth).json()
    assert "secret" not in one and one["url"] == "http://127.0.0.1:9/hook"
    listed = client.get("/v1/webhooks", headers=auth).json()
    assert [w["id"] for w in listed["data"]] == [created["id"]] and "secret" not in listed["data"][0]
    assert client.get(f"/v1/webhooks/{created['id']}", headers=other_auth).status_code == 404
    assert client.delete(f"/v1/webhooks/{created['id']}", headers=other_auth).status_code == 404
    assert client.delete(f"/v1/webhooks/{created['id']}", headers=auth).json()["deleted"] is True
    assert client.get(f"/v1/webhooks/{created['id']}", headers=auth).status_code == 404
    assert client.get(f"/v1/webhooks/{created['id']}/deliveries", headers=auth).status_code == 404


def test_default_event_types_are_all_of_them(client, auth):
    assert create(client, auth, "http://127.0.0.1:9/hook")["event_types"] == [
        "job.succeeded", "job.failed", "job.cancelled", "job.warning", "job.checkpoint", "job.paused"]


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/hook", "http://localhost/hook", "http://10.1.2.3/hook",
                                 "http://169.254.169.254/latest", "http://[::1]/hook", "http://0.0.0.0/"])
def test_private_addresses_are_refused_at_creation(client, auth, monkeypatch, url):
    monkeypatch.setattr(settings, "WEBHOOK_ALLOW_PRIVATE", False)
    r = client.post("/v1/webhooks", headers=auth, json={"url": url})
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "invalid_url" and r.json()["param"] == "url"
    assert "non-public" in r.json()["detail"]


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "127.0.0.1/hook", "http://user:pw@127.0.0.1/",
                                 "http://127.0.0.1:99999/", "http://hooks.test/hook"])
def test_malformed_or_unresolvable_urls_are_refused(client, auth, resolver, url):
    resolver({})  # DNS knows no name
    r = client.post("/v1/webhooks", headers=auth, json={"url": url})
    assert r.status_code == 422 and r.json()["param"] == "url", r.text


def test_a_completed_pause_is_the_job_paused_webhook():
    from core.webhooks import webhook_type

    assert webhook_type("job.status", {"status": "paused"}) == "job.paused"
    assert [webhook_type("job.status", {"status": s}) for s in ("pausing", "queued", "running")] == [None] * 3
    assert webhook_type("job.done", {"status": "cancelled"}) == "job.cancelled"


def test_unknown_event_type_is_refused(client, auth):
    r = client.post("/v1/webhooks", headers=auth, json={"url": "http://127.0.0.1:9/", "event_types": ["job.metrics"]})
    assert r.status_code == 422 and r.json()["param"] == "event_types.0"


# --- delivery -----------------------------------------------------------------------------------------

def test_retries_with_backoff_until_accepted_and_signatures_verify(client, auth, project_key, senders, monkeypatch):
    schedule = [0.5, 1.0, 1.0]
    monkeypatch.setattr(settings, "WEBHOOK_RETRY_SCHEDULE_S", schedule)
    with Receiver([500, 500, 204]) as receiver:
        hook = create(client, auth, receiver.url, event_types=["job.succeeded", "job.checkpoint"])
        job_id = finished_job(project_key[0])
        emit(job_id, "job.metrics", {"step": 1, "values": {"loss": 1.0}})  # not a webhook event
        emit(job_id, "job.warning", {"code": "kl_high", "message": "KL 0.25"})  # not subscribed
        emit(job_id, "job.done", {"status": "succeeded"})
        senders(1)
        wait_for(lambda: len(receiver.requests) >= 3, timeout=30, what="three attempts")
        time.sleep(0.5)  # nothing more may come after the accepted one
    assert len(receiver.requests) == 3
    verifier = Verifier(hook["secret"])
    ids = {r["headers"]["webhook-id"] for r in receiver.requests}
    assert len(ids) == 1  # the same message id on every retry
    for request in receiver.requests:
        payload = verifier.verify(request["body"], request["headers"])  # raises on a bad signature
        assert payload["type"] == "job.succeeded"
        assert payload["data"]["job_id"] == job_id and payload["data"]["status"] == "succeeded"
    with pytest.raises(WebhookVerificationError):  # another secret does not verify: the check is real
        Verifier("whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB").verify(receiver.requests[0]["body"],
                                                                          receiver.requests[0]["headers"])
    gaps = [b["at"] - a["at"] for a, b in zip(receiver.requests, receiver.requests[1:], strict=False)]
    assert gaps[0] >= schedule[0] * 0.9 and gaps[1] >= schedule[1] * 0.9, gaps

    log = client.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=auth).json()["data"]
    assert len(log) == 1
    entry = log[0]
    assert entry["id"] in ids and entry["job_id"] == job_id and entry["event_type"] == "job.succeeded"
    assert (entry["status"], entry["attempts"], entry["last_status_code"]) == ("succeeded", 3, 204)
    assert entry["last_error"] is None and entry["next_attempt_at"] is None and entry["delivered_at"] is not None


def settled_delivery(client, auth, hook_id: str) -> dict:
    def settled():
        data = client.get(f"/v1/webhooks/{hook_id}/deliveries", headers=auth).json()["data"]
        return data if data and data[0]["status"] != "pending" else None

    return wait_for(settled, timeout=60, what="the delivery to settle")[0]


# The next two keep the session's schedule and timeout (tests/conftest.py): its Celery worker's
# sender, when one runs, may make some of the attempts.

def test_a_delivery_fails_for_good_after_the_schedule(client, auth, project_key, senders):
    assert settings.WEBHOOK_RETRY_SCHEDULE_S == [0.5, 1.0, 1.0]
    with Receiver([503]) as receiver:
        hook = create(client, auth, receiver.url)
        job_id = finished_job(project_key[0])
        emit(job_id, "job.done", {"status": "failed"})
        senders(1)
        entry = settled_delivery(client, auth, hook["id"])
        time.sleep(0.5)
    assert (entry["status"], entry["attempts"], entry["last_status_code"]) == ("failed", 4, 503)
    assert entry["last_error"] == "HTTP 503" and entry["next_attempt_at"] is None
    assert len(receiver.requests) == 4
    assert json.loads(receiver.requests[0]["body"])["type"] == "job.failed"


def test_a_receiver_slower_than_the_timeout_is_a_failed_attempt(client, auth, project_key, senders):
    assert settings.WEBHOOK_TIMEOUT_S == 1.0
    with Receiver([200], delay_s=1.5) as receiver:
        hook = create(client, auth, receiver.url)
        emit(finished_job(project_key[0]), "job.done", {"status": "succeeded"})
        senders(1)
        entry = settled_delivery(client, auth, hook["id"])
    assert (entry["status"], entry["attempts"], entry["last_status_code"]) == ("failed", 4, None)
    assert entry["last_error"].startswith("ReadTimeout")


def test_workers_poll_for_new_events_every_outbox_poll_s(database, monkeypatch):
    class CountingSender(WebhookSender):
        idle_passes = 0
        """Passes that found nothing to send: after each, the thread waits the poll interval."""

        def run_once(self) -> int:
            sent = super().run_once()
            CountingSender.idle_passes += sent == 0
            return sent

    monkeypatch.setattr(settings, "OUTBOX_POLL_S", 5.0)
    sender = CountingSender()  # the interval from the setting
    sender.start()
    time.sleep(1.5)
    sender.stop()
    assert CountingSender.idle_passes == 1  # the default 1 s would have made two


def test_events_from_before_the_webhook_are_not_sent(client, auth, project_key, senders):
    with Receiver([200]) as receiver:
        job_id = finished_job(project_key[0])
        emit(job_id, "job.checkpoint", {"checkpoint_id": "ckpt-old", "step": 1, "metrics": {}})
        time.sleep(0.05)
        hook = create(client, auth, receiver.url)
        emit(job_id, "job.checkpoint", {"checkpoint_id": "ckpt-new", "step": 2, "metrics": {}})
        senders(1)
        wait_for(lambda: receiver.requests, timeout=30, what="a delivery")
        time.sleep(0.5)
    bodies = [json.loads(r["body"]) for r in receiver.requests]
    assert [b["data"]["checkpoint_id"] for b in bodies] == ["ckpt-new"]
    assert client.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=auth).json()["data"][0]["attempts"] == 1


def test_concurrent_senders_send_each_message_once(client, auth, project_key, senders):
    with Receiver([200]) as receiver:
        create(client, auth, receiver.url)
        jobs = [finished_job(project_key[0]) for _ in range(12)]
        senders(3)  # three workers' threads at once
        for job_id in jobs:
            emit(job_id, "job.done", {"status": "cancelled"})
        wait_for(lambda: len(receiver.requests) >= len(jobs), timeout=30, what="every delivery")
        time.sleep(1.0)
    ids = [r["headers"]["webhook-id"] for r in receiver.requests]
    assert len(ids) == len(set(ids)) == len(jobs)
    assert sorted(json.loads(r["body"])["data"]["job_id"] for r in receiver.requests) == sorted(jobs)


SECRET = "whsec_QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB"


def test_dns_rebinding_is_refused_at_delivery_time(client, auth, resolver, monkeypatch):
    """A name that resolved to a public address at creation and to loopback at delivery."""
    monkeypatch.setattr(settings, "WEBHOOK_ALLOW_PRIVATE", False)
    with Receiver([200]) as receiver:
        port = receiver.server.server_address[1]
        url = f"http://hooks.test:{port}/hook"
        resolver({"hooks.test": "93.184.215.14"})  # public: creation is fine (nothing is sent then)
        assert client.post("/v1/webhooks", headers=auth, json={"url": url}).status_code == 201
        resolver({"hooks.test": "127.0.0.1"})  # the attacker's DNS now answers loopback
        with httpx.Client() as http, pytest.raises(sender_mod.UnsafeUrl, match="non-public"):
            sender_mod.post(http, url, SECRET, "msg-1", b"{}")
    assert receiver.requests == []


def test_delivery_connects_to_the_address_it_checked(resolver):
    """The connection goes to the checked address (no second lookup a rebinding DNS could answer
    differently), with the URL's own name in `Host`."""
    with Receiver([200]) as receiver:
        port = receiver.server.server_address[1]
        lookups = resolver({"hooks.test": "127.0.0.1"})
        with httpx.Client() as http:
            assert sender_mod.post(http, f"http://hooks.test:{port}/hook", SECRET, "msg-1", b"{}").status_code == 200
    assert receiver.requests[0]["headers"]["host"] == f"hooks.test:{port}"
    assert lookups == ["hooks.test"]  # once, by the check; httpx connected to the IP itself
