"""On-policy distillation (`distill_policy`): the student (the job's `model`) samples, a frozen teacher
(`method.teacher`, sharing the student's tokenizer) scores each sampled token, and the student
trains on `-(log p_student - log p_teacher)` per token (the reverse KL), optionally plus a task reward
(`distill.task_reward_weight`), with PPO's loop and roles (LoRA or full, fsdp2, packing).

This is PPO's driver (`engine.methods.ppo`) with one more role, `teacher` (`engine.roles.teacher`),
placed beside the others (colocated, or a process of its own with `resources.colocate: false`); the
dispatch chains its log-probs behind every generation and the step's advantages read them
(`engine.methods.ppo_experience`). The student's own log-probs of its samples come from the trainer's
`old_log_prob` pass (the sampler's may differ slightly; the reward must be the trained policy's).
Metrics: `distill/reverse_kl/mean` and `distill/teacher_logprob/mean` beside PPO's.
"""

from __future__ import annotations

from typing import Any

from engine.config import DistillPolicyConfig, JobRequest, JobResult
from engine.errors import ConfigError
from engine.methods.ppo import PPOTrainer
from engine.runtime.reporting import Reporter


def run_distill_policy(request: JobRequest, reporter: Reporter) -> JobResult:
    """Distil `request.teacher_path` into the policy at `request.model_path` on its own samples of the
    training prompts; returns the student in `request.output_dir`."""
    return DistillPolicyTrainer(request, reporter).fit()


def no_task_reward(response: str, ground_truth: Any, **info: Any) -> float:
    """The task score of a job without `reward`: the teacher's reward is all there is."""
    return 0.0


class DistillPolicyTrainer(PPOTrainer):
    """PPO's driver with a teacher role; the student's log-probs always come from the trainer's pass."""

    def __init__(self, request: JobRequest, reporter: Reporter) -> None:
        if not isinstance(request.config, DistillPolicyConfig):
            raise ConfigError("run_distill_policy needs a DistillPolicyConfig", param="config")
        if not request.teacher_path:
            raise ConfigError("distill_policy needs a teacher", param="teacher")
        if request.config.distill.task_reward_weight > 0 and not request.reward:
            raise ConfigError("distill.task_reward_weight > 0 needs a task reward (method.reward)",
                              param="distill.task_reward_weight")
        super().__init__(request, reporter)
        self.on_policy = False  # the reward reads the student's log-probs before the update

    def _reward_kwargs(self) -> dict[str, Any]:
        if not self.request.reward or self.cfg.distill.task_reward_weight == 0:
            return {"functions": {"none": no_task_reward}, "function": "none", "options": {}}
        return super()._reward_kwargs()

    def extra_roles(self, common: dict[str, Any]) -> list[Any]:
        from engine.roles.local import RoleSpec
        from engine.roles.teacher import Teacher

        return [RoleSpec("teacher", Teacher, (self.cfg, self.request.teacher_path), common,
                         num_workers=self.num_workers)]
