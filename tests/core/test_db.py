"""The pool's check of the connections it hands out (`core.db`): no round trip for a healthy one, and
a connection whose server side is gone (a restart, a terminated backend) replaced before anyone uses it."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from core import db as core_db
from core.config import settings

pytestmark = pytest.mark.skipif(not settings.database_url.startswith("postgresql"), reason="PostgreSQL")

_PID = text("SELECT pg_backend_pid()")


@pytest.fixture
def engine(database):
    """An engine of its own, built as `core.db.get_engine` builds one (its pool holds only what this
    test puts there)."""
    engine = core_db.get_engine.__wrapped__(settings.database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def pings(engine, monkeypatch) -> list[object]:
    seen: list[object] = []
    real = engine.dialect.do_ping
    monkeypatch.setattr(engine.dialect, "do_ping", lambda conn: seen.append(conn) or real(conn))
    return seen


def _backend(engine) -> int:
    with Session(engine) as db:
        return db.scalar(_PID)


def _terminate(pid: int) -> None:
    """What a PostgreSQL restart does to each backend: the server ends it and closes its socket."""
    admin = create_engine(settings.database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        assert conn.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        deadline = time.monotonic() + 10
        while conn.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    admin.dispose()
    time.sleep(0.2)  # the FATAL message and the close reach this side


def test_a_healthy_pooled_connection_is_handed_out_without_a_ping(engine, pings):
    first = _backend(engine)
    assert [_backend(engine) for _ in range(5)] == [first] * 5  # the same pooled connection
    assert pings == []  # (pool_pre_ping: one SELECT 1 per checkout)


def test_a_connection_the_server_closed_is_replaced_at_checkout(engine, pings):
    first = _backend(engine)
    _terminate(first)
    with Session(engine) as db:  # answers normally: no error reaches the first statement
        again = db.scalar(_PID)
        assert db.scalar(text("SELECT 1")) == 1
    assert again != first
    assert len(pings) == 1  # the dead one was pinged; its replacement is fresh
    assert _backend(engine) == again and len(pings) == 1


def test_a_restart_replaces_every_pooled_connection(engine, pings):
    """After one dead connection, the rest of the pool (as old) is not trusted either: a new
    connection for each checkout, as `pool_pre_ping` does."""
    sessions = [Session(engine) for _ in range(3)]
    old = {s.scalar(_PID) for s in sessions}
    for s in sessions:
        s.close()
    assert len(old) == 3
    for pid in old:
        _terminate(pid)
    sessions = [Session(engine) for _ in range(3)]
    new = {s.scalar(_PID) for s in sessions}
    for s in sessions:
        s.close()
    assert len(new) == 3 and not new & old
