"""Engine and session factories. The API and the workers both use sync sessions: handlers that
touch the DB run in FastAPI's thread pool, so the event loop stays free for streams."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from weakref import WeakKeyDictionary

from sqlalchemy import Engine, create_engine, event
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
    return create_engine(url, pool_pre_ping=True, pool_size=20, max_overflow=20)


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
