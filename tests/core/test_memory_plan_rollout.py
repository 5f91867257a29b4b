"""PPO's rollout workers (`rollout.colocate: false`, `resources.rollout_workers`) in what a job
reserves (admission) and in its memory plan: a group of their own beside the trainer's."""

from __future__ import annotations

from core.capacity import job_demand
from core.memory_plan import Capacity, plan_job
from core.model_shape import Architecture

ARCH = Architecture.from_config({"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 8,
                                 "intermediate_size": 1408, "num_attention_heads": 8, "num_key_value_heads": 8,
                                 "vocab_size": 32000})
HP = {"data": {"train_batch_size": 8, "max_prompt_length": 128, "max_response_length": 128},
      "rollout": {"n": 2, "colocate": False, "mode": "one_step_off"}, "actor": {"ppo_mini_batch_size": 8},
      "algorithm": {"adv_estimator": "grpo"}}


def _spec(**resources) -> dict:
    return {"method": {"type": "ppo", "hyperparameters": HP, "reward": {"function": "gsm8k"}},
            "resources": resources}


def test_rollout_workers_reserve_a_group_of_their_own():
    colocated = job_demand(_spec(num_workers=1, cpus_per_worker=2, rollout_workers=2))
    assert [(g.role, g.bundles, g.cpus) for g in colocated.groups] == [("colocated", 1, 2.0), ("rollout", 2, 2.0)]
    assert colocated.cpus == 6.0
    separate = job_demand(_spec(num_workers=1, gpus_per_worker=1, rollout_workers=1, colocate=False))
    assert [g.role for g in separate.groups] == ["actor", "ref", "reward", "rollout"]
    assert separate.gpus == 3.0  # actor, reference, rollout (a rule reward runs on CPU)
    assert [g.role for g in job_demand(_spec(num_workers=1)).groups] == ["colocated"]


def test_the_memory_plan_counts_a_rollout_worker_on_its_own():
    gpu = {"gpus_per_worker": 1}
    plain = plan_job("ppo", {**HP, "rollout": {"n": 2}}, gpu, {"policy": ARCH}, Capacity())
    split = plan_job("ppo", HP, {**gpu, "rollout_workers": 1}, {"policy": ARCH}, Capacity())
    assert "rollout" not in plain["roles"] and plain["rollout_workers"] == 0
    rollout = split["roles"]["rollout"]
    assert split["rollout_workers"] == 1
    assert rollout["weights_bytes"] > 0 and rollout["gradients_bytes"] == rollout["optimizer_bytes"] == 0
    # Its own process: the colocated trainer worker is planned without it.
    assert split["per_worker"]["total_bytes"] == plain["per_worker"]["total_bytes"]
    # Two workers split a batch's generation.
    two = plan_job("ppo", HP, {**gpu, "rollout_workers": 2}, {"policy": ARCH}, Capacity())
    assert two["roles"]["rollout"]["activations_bytes"] < rollout["activations_bytes"]
