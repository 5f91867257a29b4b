"""The client CLI against a real server: uvicorn on loopback in a thread, over the test database.
(The same small server helper as tests/sdk/conftest.py: conftest modules do not share fixtures.)"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def cli_server(app) -> Iterator[str]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.fixture
def cli_env(cli_server, project_key, monkeypatch) -> str:
    """KEEL_URL and KEEL_API_KEY of a fresh project; returns the project id."""
    monkeypatch.setenv("KEEL_URL", cli_server)
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
