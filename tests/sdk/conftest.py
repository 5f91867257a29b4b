"""The SDK against a real server (`live_server`: uvicorn on loopback, over the test database)."""

from __future__ import annotations

import pytest


@pytest.fixture
def sdk(live_server, project_key):
    """An AuthenticatedClient of a fresh project."""
    from keel_client import AuthenticatedClient

    with AuthenticatedClient(base_url=live_server, token=project_key[1], raise_on_unexpected_status=True,
                             timeout=30.0) as client:
        yield client
