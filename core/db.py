"""Engine and session factories. The API and the workers both use sync sessions: handlers that
touch the DB run in FastAPI's thread pool, so the event loop stays free for streams."""

from __future__ import annotations

import select
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.orm import Session, sessionmaker

from core.config import settings


@lru_cache(maxsize=8)
def get_engine(url: str | None = None) -> Engine:
    url = url or settings.database_url
    if url.startswith("sqlite"):
        settings.home.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(conn, _record):  # WAL: readers never block the writer
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    engine = create_engine(url, pool_size=20, max_overflow=20)
    event.listen(engine, "checkout", _ping_if_dropped(engine))
    return engine


def _ping_if_dropped(engine: Engine) -> Callable[..., None]:
    """The pool's check of a connection it hands out: `pool_pre_ping`'s ping (a failed one invalidates
    the whole pool, and the checkout gets a new connection), but only for a connection that `_dropped`
    says the server may have closed, not a round trip on every checkout. This is what lets the API
    answer normally right after a PostgreSQL restart."""

    def check(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if not _dropped(dbapi_connection):
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception:  # noqa: BLE001 - any failure: the connection is gone
            alive = False
        if not alive:
            raise exc.InvalidatePoolError()

    return check


def _dropped(dbapi_connection: Any) -> bool:
    """Whether an idle pooled connection may be dead, without a round trip: psycopg says it is closed
    or broken, or its socket is readable. Nothing is pending on an idle connection unless the server
    closed it (a restart or a terminated backend: its FATAL message, then FIN or RST, are there to
    read long before the database is back) or sent something unasked (a notice), which a ping settles.
    A server that vanished without a word (a host gone) shows nothing here, as a ping would not
    either until TCP gives up."""
    if getattr(dbapi_connection, "closed", False) or getattr(dbapi_connection, "broken", False):
        return True
    try:
        fd = dbapi_connection.fileno()
    except Exception:  # noqa: BLE001 - no socket: closed
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


_FACTORIES: WeakKeyDictionary[Engine, sessionmaker[Session]] = WeakKeyDictionary()


def session_factory(url: str | None = None) -> sessionmaker[Session]:
    """One `sessionmaker` per engine: making one defines a Session subclass and sets up its event
    dispatch (about 50 listener slots), far too slow to do per request."""
    engine = get_engine(url)
    factory = _FACTORIES.get(engine)
    if factory is None:
        factory = _FACTORIES[engine] = sessionmaker(engine, expire_on_commit=False)
    return factory


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    with session_factory(url)() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
