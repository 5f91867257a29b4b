"""Offline preference optimisation (DPO and its relatives) as pure tensor functions.

The inputs are per-pair sequence log-probabilities, `(batch,)` tensors with one entry per preference
pair: the log-probability of the whole response (prompt tokens excluded) under the trained policy or
under the frozen reference. DPO sums the response tokens' log-probs; IPO averages them (Azar et al.
2023, as TRL does); the caller decides which it passes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

PREFERENCE_LOSS_TYPES = ("sigmoid", "ipo")
"""`sigmoid`: DPO (Rafailov et al. 2023), conservative with label smoothing; `ipo`: IPO (Azar et al. 2023)."""


def dpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
             ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor, beta: float,
             loss_type: str = "sigmoid", label_smoothing: float = 0.0,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair preference loss and the implicit rewards.

    With `h = (pi_c - ref_c) - (pi_r - ref_r)` (how much more the policy than the reference prefers
    the chosen response, in log-odds):

    - `sigmoid`: `-(1 - ls) * log sigmoid(beta * h) - ls * log sigmoid(-beta * h)`; `ls = 0` is DPO,
      `ls > 0` conservative DPO (cDPO: the label is wrong with probability `ls`);
    - `ipo`: `(h - 1 / (2 * beta))^2`, which pulls `h` to a finite target instead of pushing it to
      infinity (pass log-probs averaged over the response tokens, as IPO is defined).

    Args:
        policy_chosen_logps, policy_rejected_logps: `(batch,)` log-probs of the chosen / rejected
            responses under the policy (in the autograd graph).
        ref_chosen_logps, ref_rejected_logps: `(batch,)` the same under the reference (no gradient).
        beta: the KL coefficient (> 0): a larger beta keeps the policy nearer the reference.
        loss_type: one of `PREFERENCE_LOSS_TYPES`.
        label_smoothing: `ls` in `[0, 0.5)`, `sigmoid` only.

    Returns:
        `(losses, chosen_rewards, rejected_rewards)`, each `(batch,)`; the rewards are
        `beta * (policy - reference)` log-probs, detached (for metrics).
    """
    if not beta > 0:
        raise ValueError(f"beta must be positive, got {beta}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must lie in [0, 0.5), got {label_smoothing}")
    chosen_logratio = policy_chosen_logps - ref_chosen_logps
    rejected_logratio = policy_rejected_logps - ref_rejected_logps
    h = chosen_logratio - rejected_logratio
    if loss_type == "sigmoid":
        losses = -F.logsigmoid(beta * h)
        if label_smoothing:
            losses = (1.0 - label_smoothing) * losses - label_smoothing * F.logsigmoid(-beta * h)
    elif loss_type == "ipo":
        if label_smoothing:
            raise ValueError("label_smoothing applies to loss_type sigmoid only")
        losses = (h - 1.0 / (2.0 * beta)) ** 2
    else:
        raise ValueError(f"loss_type must be one of {PREFERENCE_LOSS_TYPES}, got {loss_type!r}")
    return losses, beta * chosen_logratio.detach(), beta * rejected_logratio.detach()
