"""Fixtures for the trainer tests: the demo assets under the model root, and Keel's training client
(`keel_client.training`) against a live server whose trainers are deleted after each test (their
actors hold CPUs of the session's two-CPU Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def demo_assets(database) -> dict[str, str]:
    from core.config import settings
    from engine.demo import build_demo_assets

    return build_demo_assets(Path(settings.model_roots[0]) / "trainer-demo")


@pytest.fixture
def service(live_server, project_key):
    """A `ServiceClient` of a fresh project; every trainer it made is deleted at the end."""
    from keel_client import training

    client = training.ServiceClient(base_url=live_server, api_key=project_key[1], timeout=120.0)
    yield client
    for trainer in client._http.request("GET", "/v1/trainers", params={"limit": 100})["data"]:
        if trainer["status"] != "deleted":
            client._http.request("DELETE", f"/v1/trainers/{trainer['id']}")
    client.close()
