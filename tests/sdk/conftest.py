"""The SDK against a real server: uvicorn on loopback in a thread, over the test database."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def serve(app) -> Iterator[str]:
    """Run `app` with uvicorn on a free loopback port; yields the base URL."""
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
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture(scope="session")
def live_server(app) -> Iterator[str]:
    with serve(app) as url:
        yield url


@pytest.fixture
def sdk(live_server, project_key):
    """An AuthenticatedClient of a fresh project."""
    from keel_client import AuthenticatedClient

    with AuthenticatedClient(base_url=live_server, token=project_key[1], raise_on_unexpected_status=True,
                             timeout=30.0) as client:
        yield client
