"""Fixtures for the workers' tests: a fresh project, and the demo assets (tiny Llama + datasets)
under the deployment's model root."""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

import pytest
from sqlalchemy import update

from core.config import settings
from core.db import session_scope
from core.models import Job
from core.security import get_or_create_project
from workers import dispatch
from workers.reporter import TERMINAL


@pytest.fixture(scope="session")
def demo_assets(database) -> dict[str, str]:
    """`engine.demo.build_demo_assets` under the model root (so jobs may load the model)."""
    from engine.demo import build_demo_assets

    return build_demo_assets(Path(settings.model_roots[0]) / "demo")


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    """What would be published, recorded instead of sent (these jobs are not meant to run)."""
    calls: list[str] = []
    lock = threading.Lock()

    def publish(job_id: str) -> None:
        with lock:
            calls.append(job_id)

    monkeypatch.setattr(dispatch, "_publish", publish)
    return calls


@pytest.fixture
def project_id(database):
    """A fresh project. Its jobs still queued or running at the end are cancelled, so the session's
    Celery worker (and its sweeper) never picks up a test's stub jobs."""
    with session_scope() as db:
        project, _ = get_or_create_project(db, f"workers-{secrets.token_hex(4)}")
        project_id = project.id
    yield project_id
    with session_scope() as db:
        db.execute(update(Job).where(Job.project_id == project_id, Job.status.not_in(TERMINAL))
                   .values(status="cancelled"))
