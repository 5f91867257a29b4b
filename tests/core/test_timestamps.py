"""Every timestamp column reads back aware UTC, on SQLite and PostgreSQL, whatever the host's TZ and
however the value was written (ORM, a non-UTC aware value, the database's own clock, raw SQL)."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import create_engine, select, text, update
from sqlalchemy.orm import Session

from core.clock import db_ago_sql, db_now, db_now_sql
from core.models import Base, Project, utcnow


@pytest.fixture
def non_utc_host(monkeypatch):
    """The host's zone is 5.5 h from UTC: naive local time would show as a wrong instant."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    assert time.timezone != 0
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request, tmp_path, non_utc_host):
    if request.param == "sqlite":
        eng = create_engine(f"sqlite:///{tmp_path / 'ts.db'}")
        Base.metadata.create_all(eng)
    else:
        from core.db import get_engine

        eng = get_engine(request.getfixturevalue("database"))
    yield eng
    with Session(eng) as db:
        db.execute(Project.__table__.delete().where(Project.name.like("ts-%")))
        db.commit()


def _check(value: datetime, expected: datetime, tolerance_s: float = 0.001) -> None:
    assert value.tzinfo is not None and value.utcoffset() == timedelta(0), value
    assert abs((value - expected).total_seconds()) <= tolerance_s, (value, expected)


def test_orm_values_read_back_aware_utc(engine):
    india = timezone(timedelta(hours=5, minutes=30))
    written = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=india)
    with Session(engine) as db:
        db.add(Project(name="ts-orm", created_at=written))
        db.commit()
    with Session(engine) as db:
        got = db.scalar(select(Project.created_at).where(Project.name == "ts-orm"))
        _check(got, written)
        assert got.hour == 21  # 03:04 at +05:30 is 21:34 UTC the day before: stored as UTC, not wall clock
        # A comparison with an aware value works, in Python and in SQL (bound as UTC too).
        assert got < utcnow()
        assert db.scalar(select(Project.name).where(Project.created_at == written)) == "ts-orm"


def test_database_clock_and_raw_sql_read_back_aware_utc(engine):
    with Session(engine) as db:
        db.add(Project(name="ts-clock"))
        db.commit()
        _check(db_now(db), datetime.now(UTC), tolerance_s=5)
        db.execute(update(Project).where(Project.name == "ts-clock").values(created_at=db_now_sql()))
        db.commit()
        got = db.scalar(select(Project.created_at).where(Project.name == "ts-clock"))
        _check(got, datetime.now(UTC), tolerance_s=5)
        assert db.scalar(select(Project.name).where(Project.name == "ts-clock",
                                                    Project.created_at >= db_ago_sql(60))) == "ts-clock"
        db.execute(text("UPDATE project SET created_at = CURRENT_TIMESTAMP WHERE name = 'ts-clock'"))
        db.commit()
        got = db.scalar(select(Project.created_at).where(Project.name == "ts-clock"))
        _check(got, datetime.now(UTC), tolerance_s=5)


def test_naive_values_are_refused(engine):
    with Session(engine) as db:
        db.add(Project(name="ts-naive", created_at=datetime.now()))
        with pytest.raises(Exception, match="naive datetime"):
            db.commit()


def test_no_host_zone_leaks_into_sqlite_text(tmp_path, non_utc_host):
    eng = create_engine(f"sqlite:///{tmp_path / 'raw.db'}")
    Base.metadata.create_all(eng)
    with Session(eng) as db:
        db.add(Project(name="ts-raw", created_at=datetime(2026, 6, 1, 12, 0, tzinfo=UTC)))
        db.commit()
        assert db.scalar(text("SELECT created_at FROM project")).startswith("2026-06-01 12:00:00")
    assert os.environ["TZ"] == "Asia/Kolkata"
