"""Models and migrations agree, on PostgreSQL and on SQLite, and migrations reverse cleanly."""

from core import migrate


def test_postgres_has_no_drift(database):
    assert migrate.drift() == []


def test_postgres_downgrade_and_upgrade_again(database):
    migrate.downgrade(revision="base")
    migrate.upgrade()
    assert migrate.drift() == []


def test_sqlite_migrates_without_drift(tmp_path):
    url = f"sqlite:///{tmp_path / 'keel.db'}"
    migrate.upgrade(url)
    assert migrate.drift(url) == []
    migrate.downgrade(url)
    migrate.upgrade(url)
    assert migrate.drift(url) == []
