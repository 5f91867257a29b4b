"""On-policy distillation's reward (Agarwal et al. 2024, GKD; Thinking Machines' on-policy distillation, 2025): the student
samples, and each sampled token earns the negative reverse KL to the teacher at that token, estimated
from the one sample: `-(log p_student(x_t) - log p_teacher(x_t))`."""

from __future__ import annotations

import torch


def reverse_kl_rewards(token_scores: torch.Tensor, student_log_probs: torch.Tensor,
                       teacher_log_probs: torch.Tensor, response_mask: torch.Tensor, *, kl_coef: float,
                       task_weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-token rewards of on-policy distillation.

    Args:
        token_scores: `(batch, R)` the task score on each response's last token, 0 elsewhere.
        student_log_probs, teacher_log_probs: `(batch, R)` both models' log-probs of the sampled tokens.
        response_mask: `(batch, R)`.
        kl_coef: weight of the reverse KL; task_weight: weight of the task score.

    Returns:
        `(rewards, reverse_kl)`, both `(batch, R)`: `task_weight * token_scores - kl_coef * reverse_kl`,
        `reverse_kl` the per-token estimate (0 on padding).
    """
    reverse_kl = (student_log_probs.float() - teacher_log_probs.float()) * response_mask
    return task_weight * token_scores - kl_coef * reverse_kl, reverse_kl
