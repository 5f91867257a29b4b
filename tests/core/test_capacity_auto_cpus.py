"""`resources.cpus_per_worker: auto`: the most whole CPUs per worker with which the job still fits the
whole cluster (as admission places it), the deployment's caps, and 1 where nothing better is known."""

from __future__ import annotations

import pytest

from core.capacity import Node, admission, auto_cpus_per_worker, job_demand


def spec(method: str = "sft", *, reward: dict | None = None, hyper: dict | None = None, **resources) -> dict:
    m = {"type": method, "hyperparameters": hyper or {}}
    if reward is not None:
        m["reward"] = reward
    return {"method": m, "resources": {"cpus_per_worker": "auto", **resources}}


def nodes(*cpus: float, gpus: float = 0.0) -> list[Node]:
    return [Node(f"node-{i}", f"10.0.0.{i}", cpus_total=c, cpus_available=0.0, gpus_total=gpus, gpus_available=0.0)
            for i, c in enumerate(cpus)]


def auto(job: dict, cluster: list[Node] | None, cap: int = 16, max_cpus: float = 0.0) -> int:
    return auto_cpus_per_worker(job, cluster, cap=cap, max_cpus=max_cpus)


def test_a_single_worker_job_on_an_idle_node_gets_the_node():
    assert auto(spec(), nodes(2)) == 2  # every CPU taken: the node counts as empty
    assert auto(spec("reward_model"), nodes(2)) == 2
    assert auto(spec("dpo"), nodes(2.5)) == 2  # whole CPUs only
    assert auto(spec(), nodes(2, 6, 3)) == 6  # the biggest node


def test_the_cap_bounds_it():
    assert auto(spec(), nodes(8), cap=4) == 4
    assert auto(spec(), nodes(8), cap=1) == 1
    assert auto(spec(), nodes(64)) == 16


def test_ppo_not_colocated_splits_the_node_between_its_roles():
    # actor, critic, reference and the rule reward's bundle: 4 bundles on 8 or 12 CPUs
    assert auto(spec("ppo", colocate=False, reward={"function": "gsm8k"}), nodes(8)) == 2
    assert auto(spec("ppo", colocate=False, reward={"function": "gsm8k"}), nodes(12)) == 3
    # GRPO with LoRA: no critic, no reference (the actor serves it): actor + reward
    grpo_lora = spec("ppo", colocate=False, reward={"function": "gsm8k"},
                     hyper={"algorithm": {"adv_estimator": "grpo"}, "model": {"lora_rank": 8}})
    assert auto(grpo_lora, nodes(8)) == 4
    # a reward model and 2 workers: 4 roles x 2 bundles
    assert auto(spec("ppo", colocate=False, reward={"model": "model-x"}, num_workers=2), nodes(8)) == 1
    # colocated (the default): one bundle per worker hosts every role
    assert auto(spec("ppo", reward={"function": "gsm8k"}), nodes(8)) == 8
    assert auto(spec("eval", num_workers=2, colocate=False), nodes(8)) == 4  # eval is always colocated


def test_several_workers_share_and_spread():
    assert auto(spec(num_workers=3), nodes(8)) == 2  # 3 x 2 on one node; 3 x 3 does not fit
    assert auto(spec(num_workers=2), nodes(4, 6)) == 4  # pack splits over nodes: 4 + 4, not 5 + 5
    assert auto(spec(num_workers=2, placement="strict_spread"), nodes(4, 6)) == 4
    assert auto(spec(num_workers=2, placement="strict_spread"), nodes(3, 6, 8)) == 6  # the two biggest nodes
    assert auto(spec(num_workers=3, placement="strict_spread"), nodes(4, 6)) == 1  # never fits: admission says so


def test_jobs_with_gpus_and_unknown_clusters_get_one():
    assert auto(spec(gpus_per_worker=1), nodes(64, gpus=8)) == 1
    assert auto(spec(gpus_per_worker=0.5), nodes(64, gpus=8)) == 1
    assert auto(spec(), None) == 1  # no worker has published capacity yet
    assert auto(spec(), []) == 1
    assert auto(spec(num_workers=64), nodes(8)) == 1  # too big even at 1: left to admission


def test_the_deployment_cap_on_a_job_bounds_all_its_workers():
    assert auto(spec(), nodes(16), max_cpus=6) == 6
    assert auto(spec(num_workers=2), nodes(16), max_cpus=6) == 3
    assert auto(spec("ppo", colocate=False, reward={"function": "gsm8k"}), nodes(16), max_cpus=6) == 1
    assert auto(spec(), nodes(16), max_cpus=2.5) == 2


def test_a_local_job_counts_as_one_bundle_on_one_node():
    assert auto(spec(executor="local"), nodes(4, 8)) == 8
    assert auto(spec(executor="local"), nodes(4, 8), max_cpus=3) == 3


@pytest.mark.parametrize("job", [
    spec(), spec(num_workers=3), spec(num_workers=2, placement="strict_spread"),
    spec("ppo", colocate=False, reward={"function": "gsm8k"}),
    spec("ppo", colocate=False, reward={"model": "model-x"}, num_workers=2),
    spec("rm_distill", num_workers=2, placement="spread"),
])
@pytest.mark.parametrize("cpus", [(2,), (8,), (4, 6), (3, 5, 16)])
def test_the_resolved_number_is_the_largest_admission_accepts(job, cpus):
    cluster = nodes(*cpus)
    c = auto(job, cluster, cap=16, max_cpus=20)

    def verdict(n: int) -> str:
        return admission(job_demand({**job, "resources": {**job["resources"], "cpus_per_worker": n}}), cluster,
                         max_cpus=20).status

    if verdict(1) == "refuse":
        assert c == 1
        return
    assert verdict(c) != "refuse"  # (every node is busy here: `wait`, never `refuse`)
    assert c == 16 or verdict(c + 1) == "refuse"


@pytest.mark.parametrize("value", ["0", "-2", "1025", "many"])
def test_the_cap_setting_is_a_count_of_at_least_one(value, monkeypatch):
    from pydantic import ValidationError

    from core.config import Settings

    monkeypatch.setenv("KEEL_AUTO_CPUS_PER_WORKER_MAX", value)
    with pytest.raises(ValidationError, match="AUTO_CPUS_PER_WORKER_MAX"):
        Settings()
    monkeypatch.setenv("KEEL_AUTO_CPUS_PER_WORKER_MAX", "4")
    assert Settings().AUTO_CPUS_PER_WORKER_MAX == 4
    monkeypatch.delenv("KEEL_AUTO_CPUS_PER_WORKER_MAX")
    assert Settings(_env_file=None).AUTO_CPUS_PER_WORKER_MAX == 16
