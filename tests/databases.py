"""Private PostgreSQL databases for tests that run a whole deployment of their own."""

from __future__ import annotations

import os

PG_ADMIN_URL = os.environ.get("KEEL_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def private_database(suffix: str):
    """A freshly migrated database `<session db>_<suffix>` beside the session's (for a deployment of
    its own, whose workers and sweepers never see other tests' jobs); yields its URL, then drops it."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from core import migrate
    from core.config import settings
    from core.db import get_engine

    url = make_url(settings.database_url)
    name = f"{url.database}_{suffix}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    db_url = url.set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(db_url)
    try:
        yield db_url
    finally:
        get_engine(db_url).dispose()
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": name})
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()
