"""On-policy distillation's hyperparameters (`distill_policy`): PPO's, plus the `distill` section that
weighs the teacher's per-token reward against a task reward (engine/config/distill.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from api.schemas.hyperparameters.fields import Coef, Strict, errors_at
from api.schemas.hyperparameters.ppo import AlgorithmConfig, PPOConfig


class DistillConfig(Strict):
    """The reward: per token `-reverse_kl_coef * (log p_student - log p_teacher)`, plus
    `task_reward_weight` times the task reward (`method.reward`) on the last token."""

    reverse_kl_coef: Annotated[float, Field(gt=0.0, le=1e6)] = 1.0
    """Weight of the per-token reverse KL to the teacher."""
    task_reward_weight: Coef = 0.0
    """Weight of the task reward (0: the teacher alone; then `method.reward` may be left out)."""


def _distill_algorithm() -> AlgorithmConfig:
    return AlgorithmConfig(adv_estimator="reinforce_plus_plus", gamma=0.0, use_kl_in_reward=False)


class DistillPolicyConfig(PPOConfig):
    """PPO's hyperparameters with a `distill` section; by default each token's advantage is its own
    reward whitened over the batch (REINFORCE++, gamma 0) and no KL to the reference in the reward."""

    algorithm: AlgorithmConfig = Field(default_factory=_distill_algorithm)
    distill: DistillConfig = Field(default_factory=DistillConfig)

    @model_validator(mode="after")
    def _teacher_scores_each_step(self):
        problems = []
        if self.algorithm.adv_estimator == "remax":
            problems.append((("algorithm", "adv_estimator"), "remax",
                             ("distill_policy does not support adv_estimator remax (its greedy baseline has no "
                             "teacher reward)")))
        if self.guardrails.reward_filter.replay_buffer_size:
            problems.append((("guardrails", "reward_filter", "replay_buffer_size"),
                             self.guardrails.reward_filter.replay_buffer_size,
                             "distill_policy does not replay samples (a replayed sample has no teacher log-probs)"))
        if self.rollout.mode != "sync" or not self.rollout.colocate:
            problems.append((("rollout", "mode"), self.rollout.mode,
                             ("distill_policy needs rollout.mode sync with rollout.colocate true (the teacher "
                             "scores each batch in its step)")))
        if problems:
            raise errors_at("DistillPolicyConfig", *problems)
        return self
