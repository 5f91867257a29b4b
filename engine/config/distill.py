"""On-policy distillation's config (`distill_policy`): PPO's, plus how the teacher's per-token
reward is weighed against a task reward. The student samples, the teacher scores each sampled token,
and the student trains on the reverse KL as a per-token reward with PPO's machinery."""

from __future__ import annotations

from dataclasses import dataclass

from engine.config.ppo import AlgorithmConfig, PPOConfig


@dataclass(frozen=True)
class DistillConfig:
    """The reward of `distill_policy`: per token `-reverse_kl_coef * (log p_student - log p_teacher)`,
    plus `task_reward_weight` times the task reward (`reward`) on the last token."""

    reverse_kl_coef: float = 1.0
    """Weight of the per-token reverse KL to the teacher (must be positive)."""
    task_reward_weight: float = 0.0
    """Weight of the task reward (0: the teacher alone; then the job needs no `reward`)."""


DISTILL_ALGORITHM = AlgorithmConfig(adv_estimator="reinforce_plus_plus", gamma=0.0, use_kl_in_reward=False)


@dataclass(frozen=True)
class DistillPolicyConfig(PPOConfig):
    """PPO's config with a `distill` section. Defaults differ where distillation wants them to: each
    token's advantage is its own reward, whitened over the batch (REINFORCE++ with gamma 0, as the
    Tinker cookbook's recipe discounts by 0: far less variance than crediting the KL of the tokens that
    follow, which gamma 1 does), and no KL to the reference in the reward (the teacher is the anchor)."""

    algorithm: AlgorithmConfig = DISTILL_ALGORITHM
    distill: DistillConfig = DistillConfig()
