"""The client CLI against a real server (`live_server`: uvicorn on loopback, over the test database)."""

from __future__ import annotations

import pytest


@pytest.fixture
def cli_env(live_server, project_key, monkeypatch) -> str:
    """KEEL_URL and KEEL_API_KEY of a fresh project; returns the project id."""
    monkeypatch.setenv("KEEL_URL", live_server)
    monkeypatch.setenv("KEEL_API_KEY", project_key[1])
    return project_key[0]


@pytest.fixture
def no_dispatch(monkeypatch):
    """No worker in these tests: record what the API would have sent to the broker."""
    from workers import dispatch

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: calls.append(("enqueue_job", job_id)) or True)
    monkeypatch.setattr(dispatch, "request_cancel", lambda job_id: calls.append(("request_cancel", job_id)) or True)
    return calls


@pytest.fixture
def run_keel():
    """Run `keel ARGS...` in-process; returns click's Result (stdout and stderr apart)."""
    from typer.testing import CliRunner

    from keel_cli.main import app

    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(app, list(args), catch_exceptions=False)

    return run
