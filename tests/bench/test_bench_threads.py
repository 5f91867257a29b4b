"""`--threads default`: a benchmarked job gets a job's default resources, `cpus_per_worker: auto`
resolved as the service resolves it at creation, for one idle node with this machine's usable cores."""

from __future__ import annotations

import pytest

from bench.common import job_resources, usable_cores
from core.config import settings


@pytest.mark.parametrize("method", ["reward_model", "dpo", "ppo"])
def test_default_threads_resolve_auto_for_this_machine(method, monkeypatch):
    monkeypatch.setattr(settings, "AUTO_CPUS_PER_WORKER_MAX", 1024)
    assert job_resources(None, method).cpus_per_worker == usable_cores()  # the whole (only) node
    monkeypatch.setattr(settings, "AUTO_CPUS_PER_WORKER_MAX", 1)
    assert job_resources(None, method).cpus_per_worker == 1  # the deployment's cap, as in the service
    monkeypatch.setattr(settings, "AUTO_CPUS_PER_WORKER_MAX", 1024)
    monkeypatch.setattr(settings, "MAX_JOB_CPUS", 1.0)
    assert job_resources(None, method).cpus_per_worker == 1


def test_an_explicit_thread_count_is_the_reservation():
    resources = job_resources(3, "dpo")
    assert (resources.cpus_per_worker, resources.num_workers) == (3.0, 1)
