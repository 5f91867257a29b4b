"""engine.algos.reverse_kl_rewards: on-policy distillation's per-token reward."""

from __future__ import annotations

import torch

from engine.algos import reverse_kl_rewards


def test_reward_is_minus_the_reverse_kl_plus_the_weighted_task_score():
    student = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -3.0, -9.0]])
    teacher = torch.tensor([[-1.5, -1.0, -0.5], [-0.1, -4.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    rewards, kl = reverse_kl_rewards(scores, student, teacher, mask, kl_coef=2.0, task_weight=0.5)
    torch.testing.assert_close(kl, torch.tensor([[0.5, -1.0, 0.0], [-0.1, 1.0, 0.0]]))
    torch.testing.assert_close(rewards, 0.5 * scores - 2.0 * kl)
    # The task weight and the coefficient each change the reward; padding earns nothing from the KL.
    alone, _ = reverse_kl_rewards(scores, student, teacher, mask, kl_coef=1.0, task_weight=0.0)
    torch.testing.assert_close(alone, -kl)
    assert alone[1, 2] == 0.0
