"""Fixtures for the Tinker-room tests: the official `tinker` client (0.38) against a live Keel on
PostgreSQL, with the session's real Celery worker and Ray, a tiny local base model under
KEEL_MODEL_ROOTS, and a key in Tinker's `tml-` form. The live stack is the test session's (started
once); each test gets its own `ServiceClient`, closed (its session finished, its trainers deleted, so
their actors give the session's two Ray CPUs back) when the test ends."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

tinker = pytest.importorskip("tinker")

os.environ["TINKER_TELEMETRY"] = "0"  # the room accepts telemetry and drops it; no need to send any
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the client loads the tokenizer from the model's directory


@pytest.fixture(scope="session")
def tinker_assets(database) -> dict[str, str]:
    """The demo model, tokenizer and datasets under the deployment's model root (trainers may load them)."""
    from core.config import settings
    from engine.demo import build_demo_assets

    return build_demo_assets(Path(settings.model_roots[0]) / "tinker-demo")


@pytest.fixture(scope="session")
def base_model(tinker_assets) -> str:
    """The small demo model's directory: what `base_model` names in these tests."""
    return tinker_assets["small_model"]


@pytest.fixture(scope="session")
def tinker_key(database) -> str:
    """A Keel key of a project of its own, in the form the client takes (`tml-` + the key)."""
    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project, tinker_api_key

    with session_scope() as db:
        project, _ = get_or_create_project(db, "tinker-tests")
        return tinker_api_key(create_api_key(db, project))


@pytest.fixture(scope="session")
def tinker_url(live_server, celery_worker) -> str:
    """The live Keel whose worker runs the trainers' operations (the client appends /api/v1)."""
    return live_server


@pytest.fixture
def service(tinker_url, tinker_key):
    """`tinker.ServiceClient` on the live Keel, as a context manager: its exit finishes the session."""
    with tinker.ServiceClient(base_url=tinker_url, api_key=tinker_key) as client:
        yield client
