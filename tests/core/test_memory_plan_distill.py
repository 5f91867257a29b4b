"""`distill_policy`'s teacher in what a job reserves (admission) and in its memory plan: PPO's roles
plus the teacher's weights and a no-grad pass over the step's samples."""

from __future__ import annotations

from core.capacity import job_demand
from core.memory_plan import Capacity, plan_job
from core.model_shape import Architecture


def _arch(hidden: int, layers: int) -> Architecture:
    return Architecture.from_config({"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers,
                                     "intermediate_size": hidden * 3, "num_attention_heads": 8,
                                     "num_key_value_heads": 8, "vocab_size": 32000})


STUDENT, TEACHER = _arch(512, 8), _arch(1024, 16)
HP = {"data": {"train_batch_size": 8, "max_prompt_length": 128, "max_response_length": 128},
      "rollout": {"n": 2}, "actor": {"ppo_mini_batch_size": 8},
      "algorithm": {"adv_estimator": "reinforce_plus_plus"}}


def test_the_memory_plan_holds_the_teacher_beside_the_student():
    gpu = {"gpus_per_worker": 1}
    ppo = plan_job("ppo", HP, gpu, {"policy": STUDENT}, Capacity())
    distill = plan_job("distill_policy", HP, gpu, {"policy": STUDENT, "teacher": TEACHER}, Capacity())
    teacher = distill["roles"]["teacher"]
    assert "teacher" not in ppo["roles"]
    assert teacher["weights_bytes"] == 4 * TEACHER.parameters("lm")  # float32, as the reference
    assert teacher["gradients_bytes"] == teacher["optimizer_bytes"] == 0
    assert distill["colocated"]  # in the same process as PPO's roles: its weights add up
    assert distill["per_worker"]["total_bytes"] >= ppo["per_worker"]["total_bytes"] + teacher["weights_bytes"]
    # A teacher Keel cannot read here (a hub id) is planned at the student's size.
    unknown = plan_job("distill_policy", HP, gpu, {"policy": STUDENT}, Capacity())
    assert unknown["roles"]["teacher"]["weights_bytes"] == 4 * STUDENT.parameters("lm")


def test_admission_reserves_the_teachers_workers_when_roles_are_separate():
    spec = {"method": {"type": "distill_policy", "teacher": "org/t", "hyperparameters": HP},
            "resources": {"num_workers": 1, "gpus_per_worker": 1, "colocate": False}}
    assert [g.role for g in job_demand(spec).groups] == ["actor", "ref", "reward", "teacher"]
    assert job_demand(spec).gpus == 3.0  # actor, reference, teacher (no task reward model)
    spec["resources"]["colocate"] = True
    assert [g.role for g in job_demand(spec).groups] == ["colocated"]
