"""Fixtures for the fault tests: one deployment (`deployment.Stack`) for the whole package, over a
private database, so no other test's worker or sweeper ever sees these jobs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="package")
def fault_db():
    """A freshly migrated database of its own (beside the session's test database); dropped afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from core import migrate
    from core.config import settings
    from core.db import get_engine

    url = make_url(settings.database_url)
    name = f"{url.database}_faults"
    admin_url = os.environ.get("KEEL_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    db_url = url.set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(db_url)
    yield db_url
    get_engine(db_url).dispose()
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": name})
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
    admin.dispose()


@pytest.fixture(scope="package")
def fault_assets() -> dict[str, str]:
    """The demo assets (tiny Llama + datasets) under the deployment's model root."""
    from core.config import settings
    from engine.demo import build_demo_assets

    return build_demo_assets(Path(settings.model_roots[0]) / "faults-demo")


@pytest.fixture(scope="package")
def deployment(fault_db, fault_assets, ray_cluster, keel_home):
    """The `fault_stack.Stack`, started once for the package."""
    from fault_stack import Stack

    stack = Stack(db_url=fault_db, ray_address=ray_cluster, home=keel_home / "faults", assets=fault_assets)
    try:
        stack.start()
        yield stack
    finally:
        stack.close()


@pytest.fixture
def stack(deployment):
    """The deployment, every part up. Afterwards nothing of a test is left running: a job still active
    is cancelled (and the worker restarted if it does not stop), so the next test starts clean."""
    deployment.ensure_up()
    yield deployment
    deployment.ensure_up()
    leftovers = deployment.active_jobs()
    for job_id in leftovers:
        deployment.cancel(job_id)
    try:
        for job_id in leftovers:
            deployment.wait_terminal(job_id, 30)
    except AssertionError:
        deployment.worker.kill()
        deployment.worker.start()
