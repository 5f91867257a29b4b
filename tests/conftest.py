"""Test setup: real PostgreSQL and Redis on loopback, a private database and queue namespace per
test session (so parallel runs never collide), local storage in a temporary KEEL_HOME.

Environment is set before anything imports `core.config`."""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import pytest

_RUN = f"{os.getpid()}_{secrets.token_hex(3)}"
_PG_ADMIN = os.environ.get("KEEL_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
TEST_DB = f"keel_test_{_RUN}"
_HOME = Path(tempfile.mkdtemp(prefix=f"keel-test-{_RUN}-"))

os.environ.update({
    "KEEL_ENV": "test",
    "KEEL_HOME": str(_HOME),
    "KEEL_DATABASE_URL": _PG_ADMIN.rsplit("/", 1)[0] + "/" + TEST_DB,
    "KEEL_REDIS_URL": os.environ.get("KEEL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "KEEL_BROKER_URL": os.environ.get("KEEL_TEST_BROKER_URL", "redis://127.0.0.1:6379/1"),
    "KEEL_QUEUE_NAMESPACE": f"test{_RUN}.",
    "KEEL_STORAGE_URL": str(_HOME / "artifacts"),
    "KEEL_MODEL_ROOTS": str(_HOME / "models"),
    "KEEL_RATE_LIMIT_PER_MINUTE": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
})
(_HOME / "models").mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="session")
def keel_home() -> Path:
    return _HOME


@pytest.fixture(scope="session")
def database():
    """A freshly migrated PostgreSQL database for this test session; dropped afterwards."""
    from sqlalchemy import create_engine, text

    from core import migrate
    from core.config import settings

    admin = create_engine(_PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{TEST_DB}"'))
    migrate.upgrade()
    yield settings.database_url
    from core.db import get_engine

    get_engine().dispose()
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": TEST_DB})
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEST_DB}"'))
    admin.dispose()


@pytest.fixture
def db(database):
    from core.db import session_factory

    with session_factory()() as session:
        yield session


@pytest.fixture(scope="session")
def app(database):
    from api.main import create_app

    return create_app()


@pytest.fixture
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        yield c


def _new_project_key(name: str) -> tuple[str, str]:
    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project

    with session_scope() as db:
        project, _ = get_or_create_project(db, name)
        return project.id, create_api_key(db, project)


@pytest.fixture
def project_key(database) -> tuple[str, str]:
    """(project_id, api_key) of a fresh project."""
    return _new_project_key(f"proj-{secrets.token_hex(4)}")


@pytest.fixture
def auth(project_key) -> dict[str, str]:
    return {"Authorization": f"Bearer {project_key[1]}"}


@pytest.fixture
def other_auth(database) -> dict[str, str]:
    """Headers of a second, unrelated project (tenancy tests)."""
    return {"Authorization": f"Bearer {_new_project_key(f'other-{secrets.token_hex(4)}')[1]}"}
