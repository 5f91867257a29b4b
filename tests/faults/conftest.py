"""Fixtures for the fault tests: one deployment (`deployment.Stack`) for the whole package, over a
private database, so no other test's worker or sweeper ever sees these jobs."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="package")
def fault_db(database):
    """A freshly migrated database of its own (beside the session's test database); dropped afterwards."""
    from databases import private_database

    yield from private_database("faults")


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
