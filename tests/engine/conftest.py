"""Fixtures for engine tests: deterministic demo assets (tiny Llama + tokenizer + datasets) and a
loopback-only local Ray, each built once per test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def demo_assets(tmp_path_factory):
    """`engine.demo.build_demo_assets` output: dict of names -> paths (model dir, datasets)."""
    from engine.demo import build_demo_assets

    return build_demo_assets(tmp_path_factory.mktemp("demo-assets"))


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray on loopback for the whole session (2 CPUs, no dashboard)."""
    import ray

    from engine.runtime.cluster import connect

    connect(None, num_cpus=2)
    yield ray
    ray.shutdown()
