"""`workers.dispatch._publish` on the real Redis broker: one `redis.Redis` per kombu channel instead of
one per message (`_keep_client`), and the messages exactly what Celery's own `send_task` writes."""

from __future__ import annotations

import json
import secrets
import time

import pytest
import redis
from kombu.transport import redis as kombu_redis

from bench.common import free_port
from core.config import settings
from workers import dispatch
from workers.celery_app import celery_app

pytestmark = pytest.mark.skipif(not settings.broker_url.startswith("redis"), reason="a Redis broker")


@pytest.fixture
def queue(monkeypatch):
    """A queue of this test's own (no Celery worker consumes it); its keys go afterwards."""
    name = f"{settings.QUEUE_NAMESPACE}keel.test-publish-{secrets.token_hex(4)}"
    monkeypatch.setattr(dispatch, "JOB_QUEUE", name)
    broker = redis.Redis.from_url(settings.broker_url)
    yield name, broker
    keys = list(broker.scan_iter(match=f"*{name}*"))
    if keys:
        broker.delete(*keys)
    broker.close()


def _sent(broker, name: str) -> list[dict]:
    return [json.loads(raw) for raw in reversed(broker.lrange(name, 0, -1))]  # LPUSH: newest first


def _comparable(message: dict) -> dict:
    """A message without what differs between any two sends (ids, tags, the origin's pid)."""
    headers = {k: v for k, v in message["headers"].items() if k not in ("id", "root_id", "origin")}
    props = {k: v for k, v in message["properties"].items() if k not in ("correlation_id", "delivery_tag")}
    return {**message, "headers": headers, "properties": props}


def test_publish_builds_one_redis_client_per_channel_and_sends_what_send_task_sends(queue, monkeypatch):
    name, broker = queue
    made = []  # the clients kombu builds to publish with (not the channel's one for consuming)
    real = kombu_redis.Channel._create_client

    def create(self, asynchronous=False):
        if not asynchronous:
            made.append(self)
        return real(self, asynchronous=asynchronous)

    monkeypatch.setattr(kombu_redis.Channel, "_create_client", create)
    with celery_app.producer_or_acquire() as producer:  # a channel that kept no client yet
        producer.channel.__dict__.pop("_keel_client", None)
        producer.channel.__dict__.pop("conn_or_acquire", None)

    job_ids = [f"job-test-{i}" for i in range(6)]
    dispatch._publish(job_ids[0])  # kombu's own clients (the queue's declaration, the message), then the kept one
    made.clear()
    for job_id in job_ids[1:]:
        dispatch._publish(job_id)
    assert made == []  # (kombu alone: one per message)

    # What Celery's send_task writes given no producer (as `_publish` did before).
    celery_app.send_task(dispatch.RUN_JOB_TASK, args=["job-test-plain"], queue=name)
    sent = _sent(broker, name)
    assert len(sent) == 7
    assert [m["headers"]["task"] for m in sent] == [dispatch.RUN_JOB_TASK] * 7
    assert [json.loads(_body(m))[0] for m in sent] == [[j] for j in [*job_ids, "job-test-plain"]]
    plain = _comparable(sent[-1])
    for message in sent[:-1]:
        mine = _comparable(message)
        assert {**mine, "body": None, "headers": {**mine["headers"], "argsrepr": None}} == \
            {**plain, "body": None, "headers": {**plain["headers"], "argsrepr": None}}


def test_a_channel_with_a_new_pool_gets_a_new_client(queue):
    with celery_app.producer_or_acquire() as producer:
        channel = producer.channel
        dispatch._keep_client(channel)
        first = channel._keel_client
        dispatch._keep_client(channel)
        assert channel._keel_client is first
        channel._pool = None  # what kombu does when it drops the channel's pool
        dispatch._keep_client(channel)
        assert channel._keel_client is not first and channel._keel_client.connection_pool is channel.pool
        with channel.conn_or_acquire() as client:
            assert client is channel._keel_client


def test_the_queue_is_declared_once_per_connection(queue, monkeypatch):
    """`_declare`: kombu's declaration of the job queue happens on a connection's first publish and
    again after a reconnect (which empties the connection's `declared_entities`), not on every publish."""
    from kombu.messaging import Producer

    name, broker = queue
    declared = []
    real = Producer.maybe_declare

    def counting(self, entity, retry=False, **policy):
        declared.append(entity.name)
        return real(self, entity, retry, **policy)

    monkeypatch.setattr(Producer, "maybe_declare", counting)
    with celery_app.producer_or_acquire() as producer:
        connection = producer.__connection__
    connection.declared_entities.clear()  # as a reconnect leaves it
    dispatch._publish("job-test-0")
    assert declared == [name]
    for i in range(1, 4):
        dispatch._publish(f"job-test-{i}")
    assert declared == [name]
    connection.declared_entities.clear()
    dispatch._publish("job-test-4")
    assert declared == [name, name]
    assert len(_sent(broker, name)) == 5


def test_a_down_broker_still_answers_within_the_publish_retry_policy(monkeypatch):
    """`_PUBLISH_RETRY` bounds a publish to a broker that refuses connections (about a second), so
    the API never hangs on it; nothing of `_keep_client` may connect outside that policy."""
    from celery import Celery

    port = free_port()  # a port nobody listens on
    down = Celery("keel-test-down", broker=f"redis://127.0.0.1:{port}/1")
    down.conf.update(celery_app.conf.table(with_defaults=False))
    down.conf.broker_url = f"redis://127.0.0.1:{port}/1"
    monkeypatch.setattr(dispatch, "celery_app", down)
    for _ in range(2):
        started = time.monotonic()
        with pytest.raises(Exception):  # noqa: B017 - kombu's OperationalError, whatever its wrapping
            dispatch._publish("job-test-down")
        assert time.monotonic() - started < 3


def _body(message: dict) -> bytes:
    import base64

    body = message["body"]
    return base64.b64decode(body) if message["properties"].get("body_encoding") == "base64" else body.encode()
