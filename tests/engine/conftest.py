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


@pytest.fixture(scope="module")
def one_thread():
    """Engine tests that train run torch on one thread (the timing and equivalence checks expect it), then
    restore the count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def sft_rows(demo_assets):
    from engine import data as data_lib

    return data_lib.load_rows(demo_assets["sft_train"], "sft")


@pytest.fixture
def sft_datums(sft_rows, demo_assets):
    """`sft_datums(n, offset)`: cross-entropy datums of demo SFT rows (weight 0.1 per response token)."""
    from trainer_sessions import sft_datums_of

    from engine.models import load_tokenizer

    tokenizer = load_tokenizer(demo_assets["model"])

    def build(n=4, *, offset=0):
        return sft_datums_of(tokenizer, sft_rows[offset:offset + n])

    return build
