"""The production topology, as processes: PostgreSQL, Redis, a Ray cluster, `keel worker` joined to it
by `KEEL_RAY_ADDRESS`, and `keel api`. Through the HTTP API a 2-worker data-parallel reward model and a
2-worker PPO job run on a single node (`ray start --head`) and spread over two Ray nodes; both succeed,
`job.placement` shows where every worker ran, and the results are the same on one node and on two."""

from __future__ import annotations

import math

import pytest
from topology import Topology

pytestmark = pytest.mark.slow

RM_METHOD = {"type": "reward_model", "hyperparameters": {
    "data": {"train_batch_size": 16, "max_length": 96}, "optim": {"lr": 1e-3},
    "trainer": {"total_training_steps": 6, "save_freq": 3, "test_freq": 3}}}
PPO_METHOD = {"type": "ppo", "reward": {"function": "gsm8k"}, "hyperparameters": {
    "data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
    "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 1, "optim": {"lr": 1e-4}},
    "rollout": {"n": 2}, "trainer": {"total_training_steps": 3, "save_freq": 3}}}
TWO_WORKERS = {"num_workers": 2, "cpus_per_worker": 1}


def _run_both(topology: Topology, placement: str) -> dict[str, dict]:
    """The RM job, then the PPO job (each waits for the other's CPUs otherwise); their final job objects."""
    resources = {**TWO_WORKERS, "placement": placement}
    rm = topology.wait_succeeded(topology.create_job(RM_METHOD, file="preference", resources=resources))
    ppo = topology.wait_succeeded(topology.create_job(PPO_METHOD, file="prompts", resources=resources))
    return {"rm": rm, "ppo": ppo}


def _results(job: dict) -> dict[str, float]:
    """What training computed (losses, rewards, accuracies), without timings and throughput."""
    return {k: v for k, v in job["latest_metrics"].items()
            if not k.startswith(("timing_s/", "perf/")) and isinstance(v, float) and math.isfinite(v)}


def _placement_event(topology: Topology, job_id: str) -> list[dict]:
    events = [e for e in topology.events(job_id) if e["type"] == "job.placement"]
    assert len(events) == 1, events
    return events[0]["data"]["workers"]


@pytest.fixture(scope="module")
def single_node(single_node_db, ray_cluster, cluster_assets, keel_home):
    """`ray start --head` (the session's `ray_cluster`) + `keel worker` + `keel api`: the jobs' results."""
    topology = Topology(name="single", db_url=single_node_db, ray_address=ray_cluster, home=keel_home / "single",
                        assets=cluster_assets).start()
    try:
        yield topology, _run_both(topology, "pack")
    finally:
        topology.close()


def test_single_node_production_shape(single_node):
    topology, jobs = single_node
    for job in jobs.values():
        workers = job["placement"]
        assert workers == _placement_event(topology, job["id"])
        assert len({w["node_id"] for w in workers}) == 1, workers
        assert all(w["node_ip"] == "127.0.0.1" for w in workers)
    assert sorted((w["role"], w["rank"]) for w in jobs["rm"]["placement"]) == [("trainer", 0), ("trainer", 1)]
    assert {("actor", 0), ("actor", 1)} <= {(w["role"], w["rank"]) for w in jobs["ppo"]["placement"]}
    assert jobs["rm"]["latest_metrics"]["val/rm/accuracy"] > 0.5


def test_jobs_spread_over_two_nodes_match_one_node(single_node, two_nodes, two_node_db, cluster_assets, keel_home):
    _, reference = single_node
    topology = Topology(name="twonode", db_url=two_node_db, ray_address=two_nodes.address,
                        home=keel_home / "twonode", assets=cluster_assets).start()
    try:
        jobs = _run_both(topology, "spread")
        for name, job in jobs.items():
            workers = job["placement"]
            assert workers == _placement_event(topology, job["id"])
            trainers = [w for w in workers if w["role"] in ("trainer", "actor")]
            assert len(trainers) == 2
            assert {w["node_id"] for w in trainers} == set(two_nodes.node_ids), (name, workers)
            assert _results(job) == pytest.approx(_results(reference[name]), rel=1e-4, abs=1e-6), name
    finally:
        topology.close()
