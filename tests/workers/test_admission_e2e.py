"""Admission control end to end: `keel api` + `keel worker` on a real 4-CPU Ray cluster. While a job
holds 2 CPUs, a job asking for 3 is accepted but waits as `queued` with `queue_reason`
`waiting_for_resources`, spending no attempt; when the first job finishes it runs, on its first
attempt, and succeeds (without admission control it would claim an attempt and wait for a placement
group instead)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SFT = {"type": "sft", "hyperparameters": {
    "data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
    "optim": {"lr": 1e-3}, "trainer": {"total_training_steps": 3}}}
LONG_SFT = {"type": "sft", "hyperparameters": {**SFT["hyperparameters"], "trainer": {"total_training_steps": 100000}}}


@pytest.fixture
def deployment(database, keel_home):
    from cluster.ray_nodes import RayNodes
    from cluster.topology import Topology
    from databases import private_database

    from core.config import settings
    from engine.demo import build_demo_assets

    assets = build_demo_assets(Path(settings.model_roots[0]) / "admission-demo")
    dbs = private_database("admission")
    db_url = next(dbs)
    nodes = RayNodes([4], keel_home / "admission-ray.log")
    topology = None
    try:
        topology = Topology(name="admission", db_url=db_url, ray_address=nodes.address, home=keel_home / "admission",
                            assets=assets).start()
        yield topology
    finally:
        if topology is not None:
            topology.close()
        nodes.close()
        next(dbs, None)


def free_cpus(db_url: str) -> float | None:
    from core.capacity import fresh_nodes
    from core.db import session_scope

    with session_scope(db_url) as db:
        nodes = fresh_nodes(db)
    return None if not nodes else sum(n.cpus_available for n in nodes)


def test_a_job_waits_for_free_cpus_then_runs_on_its_first_attempt(deployment):
    from faults.fault_processes import wait_until

    first = deployment.create_job(LONG_SFT, file="sft", resources={"cpus_per_worker": 2})
    wait_until(lambda: (deployment.job(first)["progress"]["step"] or 0) >= 1, 180, interval=0.5,
               what="the first job to train")
    wait_until(lambda: free_cpus(deployment.db_url) == 2, 30, interval=0.5,
               what="the worker to publish 2 of 4 CPUs free")

    second = deployment.create_job(SFT, file="sft", resources={"cpus_per_worker": 3})
    for _ in range(8):  # it keeps waiting while the first job runs, and spends no attempt
        job = deployment.job(second)
        assert (job["status"], job["queue_reason"], job["attempts"]) == ("queued", "waiting_for_resources", 0), job
        assert deployment.job(first)["status"] == "running"
        time.sleep(0.5)

    with deployment.http() as http:  # the first job ends (a cancel frees its CPUs like a finish)
        assert http.post(f"/v1/jobs/{first}/cancel").status_code == 200
    assert deployment.wait_terminal(first, 60)["status"] == "cancelled"
    job = deployment.wait_succeeded(second, 300)
    assert job["attempts"] == 1 and job["queue_reason"] is None
    kinds = [e["type"] for e in deployment.events(second)]
    assert "job.warning" not in kinds and "job.error" not in kinds
    statuses = [e["data"]["status"] for e in deployment.events(second) if e["type"] == "job.status"]
    assert statuses == ["running", "succeeded"]
