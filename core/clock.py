"""The database's clock: liveness is judged on one clock, the database server's, never a host's.

A heartbeat written as `db_now_sql()` and a sweeper that compares it with `db_now()` agree however
far the workers' and the sweepers' wall clocks drift (NTP off, a VM resumed from a snapshot).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.functions import FunctionElement

from core.models import UtcDateTime


class db_now_sql(FunctionElement):
    """The database server's current time as an SQL expression (a value for an UPDATE's SET)."""

    type = UtcDateTime()
    inherit_cache = True
    name = "db_now"


@compiles(db_now_sql)
def _db_now_default(element, compiler, **kw) -> str:
    return "now()"


@compiles(db_now_sql, "sqlite")
def _db_now_sqlite(element, compiler, **kw) -> str:
    # SQLite's 'now' is UTC; this text sorts and parses like the values SQLAlchemy itself stores.
    return "strftime('%Y-%m-%d %H:%M:%f', 'now')"


class db_ago_sql(FunctionElement):
    """The database server's time `seconds` ago (an SQL expression; `seconds` a bound number): a
    freshness cutoff computed in the statement that uses it, not in a round trip of its own."""

    type = UtcDateTime()
    inherit_cache = True
    name = "db_ago"


@compiles(db_ago_sql)
def _db_ago_default(element, compiler, **kw) -> str:
    (seconds,) = element.clauses
    return f"now() - make_interval(secs => {compiler.process(seconds, **kw)})"


@compiles(db_ago_sql, "sqlite")
def _db_ago_sqlite(element, compiler, **kw) -> str:
    (seconds,) = element.clauses
    return f"strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || ({compiler.process(seconds, **kw)}) || ' seconds')"


_NOW = select(db_now_sql())  # built once: its cache key is computed once


def db_now(db: Session) -> datetime:
    """The database server's current time (aware, UTC: the column type reads SQLite's text as UTC)."""
    return db.scalar(_NOW)
