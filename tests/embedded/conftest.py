"""One `keel up` for the whole group, exactly as `make run` starts it: a fresh KEEL_HOME, a free port,
no database, broker or Redis URL (SQLite, the embedded broker, a local Ray), and a host zone far from
UTC, so a naive timestamp anywhere shows as an error or a shifted time."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from bench.embedded import keel_up

TZ = "Asia/Kolkata"
"""UTC+05:30: a naive local time read as UTC is 5.5 h off."""


@pytest.fixture(scope="session")
def embedded_home():
    home = Path(tempfile.mkdtemp(prefix="keel-embedded-"))
    yield home
    shutil.rmtree(home, ignore_errors=True)  # models, artifacts, databases: hundreds of MB


@pytest.fixture(scope="session")
def demo(embedded_home) -> dict[str, str]:
    """The demo model and data under the stack's default model root (KEEL_HOME/models)."""
    from engine.demo import build_demo_assets

    return build_demo_assets(embedded_home / "models" / "keel-demo")


@pytest.fixture(scope="session")
def stack(embedded_home, demo):
    with keel_up(embedded_home, tz=TZ) as running:
        yield running


@pytest.fixture(scope="session")
def http(stack):
    with stack.client() as client:
        yield client
