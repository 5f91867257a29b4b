"""Fixtures for the OpenAI-compatibility tests: the official `openai` client against a live Keel."""

from __future__ import annotations

from pathlib import Path

import pytest

openai = pytest.importorskip("openai")


@pytest.fixture(scope="session")
def demo_assets(database) -> dict[str, str]:
    """The demo model and datasets under the deployment's model root (jobs may load them)."""
    from core.config import settings
    from engine.demo import build_demo_assets

    return build_demo_assets(Path(settings.model_roots[0]) / "openai-demo")


@pytest.fixture
def oai(live_server, project_key):
    """`OpenAI(base_url=<keel>/v1, api_key=<project key>)`: the one-line change of docs/openai.md."""
    return openai.OpenAI(base_url=f"{live_server}/v1", api_key=project_key[1], max_retries=0, timeout=60)
