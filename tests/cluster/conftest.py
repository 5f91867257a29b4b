"""Fixtures for the cluster tests: the demo assets under the model root, a private database per
deployment, and a fresh two-node Ray cluster per test on loopback (`ray_nodes.RayNodes`)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="package")
def cluster_assets() -> dict[str, str]:
    from core.config import settings
    from engine.demo import build_demo_assets

    return build_demo_assets(Path(settings.model_roots[0]) / "cluster-demo")


@pytest.fixture
def two_nodes(keel_home):
    """A head and one worker node, 2 CPUs each (distinct raylets and node ids, all on 127.0.0.1)."""
    from ray_nodes import RayNodes

    nodes = RayNodes([2, 2], keel_home / "ray-nodes.log")
    try:
        yield nodes
    finally:
        nodes.close()


@pytest.fixture(scope="package")
def single_node_db(database):
    from databases import private_database

    yield from private_database("single")


@pytest.fixture(scope="package")
def two_node_db(database):
    from databases import private_database

    yield from private_database("twonode")


@pytest.fixture(scope="package")
def node_loss_db(database):
    from databases import private_database

    yield from private_database("nodeloss")
