"""`keel worker` refuses to start where a job could run twice at once: more than one worker process
on private local Rays (`--concurrency` above 1 without `KEEL_RAY_ADDRESS`, or another live worker
publishing a different cluster into the same database)."""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest
from sqlalchemy import update

from core.capacity import Node, publish
from core.clock import db_now
from core.config import settings
from core.db import get_engine, session_scope
from core.models import ClusterNode
from keel_cli import server


@pytest.fixture
def own_database(database, monkeypatch):
    """A fresh database for the test (the capacity table is deployment-wide)."""
    from databases import private_database

    dbs = private_database(f"cli{secrets.token_hex(3)}")
    monkeypatch.setattr(settings, "DATABASE_URL", next(dbs))
    get_engine.cache_clear()
    yield
    monkeypatch.undo()
    get_engine.cache_clear()
    next(dbs, None)


@pytest.fixture
def execs(monkeypatch) -> list[list[str]]:
    """The worker command `keel worker` would exec into (recorded instead)."""
    calls: list[list[str]] = []
    monkeypatch.setattr(server.os, "execvp", lambda path, argv: calls.append(argv))
    return calls


def test_concurrency_above_one_needs_a_shared_ray(run_keel, own_database, execs, monkeypatch):
    monkeypatch.setattr(settings, "RAY_ADDRESS", "")
    result = run_keel("worker", "--concurrency", "2")
    assert result.exit_code == 2 and execs == []
    assert "KEEL_RAY_ADDRESS" in result.stderr and "--concurrency=2" in result.stderr
    monkeypatch.setattr(settings, "RAY_ADDRESS", "127.0.0.1:6380")
    assert run_keel("worker", "--concurrency", "2").exit_code == 0 and len(execs) == 1
    assert "--concurrency=2" in execs[0]


def test_a_second_worker_on_another_cluster_is_refused(run_keel, own_database, execs, monkeypatch):
    monkeypatch.setattr(settings, "RAY_ADDRESS", "")
    with session_scope() as db:  # a worker elsewhere runs jobs on its own local Ray
        publish(db, "local:otherhost:4242", [Node("n-other", "10.1.2.3", 4, 4, 0, 0)])
    result = run_keel("worker")
    assert result.exit_code == 2 and execs == []
    assert "local:otherhost:4242" in result.stderr
    monkeypatch.setattr(settings, "RAY_ADDRESS", "127.0.0.1:6380")  # a shared cluster, but not that one
    assert run_keel("worker").exit_code == 2
    with session_scope() as db:  # that worker has been gone for a while: its rows are stale
        db.execute(update(ClusterNode).values(observed_at=db_now(db) - timedelta(seconds=600)))
    assert run_keel("worker").exit_code == 0 and len(execs) == 1


def test_workers_sharing_a_cluster_and_a_crashed_local_worker_are_fine(run_keel, own_database, execs,
                                                                       monkeypatch):
    import socket

    monkeypatch.setattr(settings, "RAY_ADDRESS", "127.0.0.1:6380")
    with session_scope() as db:
        publish(db, "127.0.0.1:6380", [Node("n-shared", "127.0.0.1", 4, 4, 0, 0)])
    assert run_keel("worker").exit_code == 0
    monkeypatch.setattr(settings, "RAY_ADDRESS", "")
    with session_scope() as db:  # this host's earlier worker process, now dead (keel up restarted)
        db.execute(update(ClusterNode).values(observed_at=db_now(db) - timedelta(seconds=600)))
        publish(db, f"local:{socket.gethostname()}:999999", [Node("n-mine", "127.0.0.1", 2, 2, 0, 0)])
    assert run_keel("worker").exit_code == 0 and len(execs) == 2


def test_a_stopped_keel_ups_loopback_ray_is_gone(run_keel, own_database, execs, monkeypatch):
    """`keel up` publishes its loopback Ray's address: while something listens there that Ray is up and
    another worker is refused; once nothing does (that `keel up` stopped), its fresh rows are no reason."""
    import socket

    monkeypatch.setattr(settings, "RAY_ADDRESS", "")
    listener = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    with session_scope() as db:
        publish(db, address, [Node("n-up", "127.0.0.1", 2, 2, 0, 0)])
    result = run_keel("worker")
    assert result.exit_code == 2 and execs == [] and address in result.stderr
    listener.close()
    assert run_keel("worker").exit_code == 0 and len(execs) == 1
