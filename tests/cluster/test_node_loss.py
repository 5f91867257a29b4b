"""A Ray worker node killed in the middle of a data-parallel job.

The job's two workers are spread over the head and a worker node; the worker node is SIGKILLed
(raylet and every process on it) after the first checkpoint. What must hold: the job is re-queued
(the lost worker is a system error, not the job's), the next attempt lands on the surviving node,
resumes from the last checkpoint the log recorded, and succeeds; every step is reported exactly once.
"""

from __future__ import annotations

import pytest
from faults.fault_processes import wait_until
from topology import Topology

pytestmark = [pytest.mark.slow, pytest.mark.faults]

STEPS, SAVE_FREQ = 40, 4
SFT_METHOD = {"type": "sft", "hyperparameters": {
    "data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
    "optim": {"lr": 1e-3}, "trainer": {"total_training_steps": STEPS, "save_freq": SAVE_FREQ}}}


def test_job_resumes_on_the_surviving_node(two_nodes, node_loss_db, cluster_assets, keel_home):
    topology = Topology(name="nodeloss", db_url=node_loss_db, ray_address=two_nodes.address,
                        home=keel_home / "nodeloss", assets=cluster_assets, heartbeat_timeout_s=6).start()
    try:
        job_id = topology.create_job(SFT_METHOD, file="sft", seed=5,
                                     resources={"num_workers": 2, "cpus_per_worker": 1, "placement": "spread"})
        first = wait_until(lambda: next((e for e in topology.events(job_id) if e["type"] == "job.checkpoint"), None),
                           180, interval=0.2, what="the first checkpoint")
        placed = next(e for e in topology.events(job_id) if e["type"] == "job.placement")["data"]["workers"]
        assert {w["node_id"] for w in placed} == set(two_nodes.node_ids)
        worker_node = next(n for n in two_nodes.node_ids if n != two_nodes.head_id)
        two_nodes.kill(worker_node)

        job = topology.wait_succeeded(job_id, timeout=300)
        events = topology.events(job_id)
        timeline = "\n".join(f"{e['seq']:3d} {e['type']} {str(e['data'])[:90]}" for e in events)
        statuses = [e["data"]["status"] for e in events if e["type"] == "job.status"]
        assert statuses == ["running", "queued", "running", "succeeded"], timeline
        steps = [e["data"]["step"] for e in events if e["type"] == "job.metrics"]
        assert steps == list(range(1, STEPS + 1)), timeline  # every step once: none lost, none repeated
        checkpoints = [e["data"]["step"] for e in events if e["type"] == "job.checkpoint"]
        assert checkpoints == list(range(SAVE_FREQ, STEPS + 1, SAVE_FREQ)), timeline
        resumed = [int(m.rsplit(" ", 1)[1]) for e in events if e["type"] == "job.log"
                   and (m := e["data"]["message"]).startswith("resumed from")]
        assert len(resumed) == 1 and resumed[0] in checkpoints and resumed[0] >= first["data"]["step"], timeline
        placements = [e["data"]["workers"] for e in events if e["type"] == "job.placement"]
        assert len(placements) == 2, timeline
        assert {w["node_id"] for w in placements[1]} == {two_nodes.head_id}, timeline
        assert job["placement"] == placements[1]
    finally:
        topology.close()
