"""Rollout correction: the rollout engine's sampling policy is not exactly the trainer's (another
kernel, precision or decoder; a stale weight sync), so PPO's "old" log-probs are not the ones the
tokens were drawn with. Importance weights pi_old / pi_rollout correct for it (VERL's
`algorithm.rollout_correction`; Liu, Li et al. 2025, "When Speed Kills Stability", and Yao et al.
2025, "Your efficient RL framework secretly brings you off-policy RL training").

Pure tensor functions; per-token tensors are `(batch, response_len)`.
"""

from __future__ import annotations

from typing import Literal

import torch

from engine.algos.masked import masked_mean

_LOG_BOUND = 20.0
"""Log-ratios are clamped to [-20, 20] before `exp` (VERL's safety bound): no overflow to inf."""

Level = Literal["token", "sequence"]


def logprob_gap(rollout_log_probs: torch.Tensor, log_probs: torch.Tensor,
                mask: torch.Tensor) -> tuple[float, float]:
    """`(mean, max)` of |rollout log-prob - trainer log-prob| over the real tokens (0, 0 with none)."""
    diff = (rollout_log_probs.float() - log_probs.float()).abs()
    if not bool(mask.bool().any()):
        return 0.0, 0.0
    return float(masked_mean(diff, mask)), float(diff[mask.bool()].max())


def _log_ratio(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor,
               level: Level) -> torch.Tensor:
    log_ratio = torch.where(mask.bool(), old_log_probs.float() - rollout_log_probs.float(), torch.zeros(()))
    if level == "sequence":  # the product over the sequence's tokens, every token gets it
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(log_ratio)
    elif level != "token":
        raise ValueError(f"unknown rollout correction level {level!r}")
    return log_ratio.clamp(-_LOG_BOUND, _LOG_BOUND)


def rollout_correction(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor, *,
                       rollout_is: Level | None = None, is_threshold: float = 2.0,
                       rollout_rs: Level | None = None, rs_threshold: float = 2.0,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance weights and the rejection mask for the policy loss.

    Args:
        old_log_probs: the trainer's log-probs of the sampled tokens under the sampling weights.
        rollout_log_probs: the rollout engine's log-probs of the same tokens.
        mask: `response_mask`.
        rollout_is: truncated IS (TIS): weights `min(ratio, is_threshold)` per token or per
            sequence (None: all weights 1).
        rollout_rs: masked IS (MIS): tokens, or whole sequences, whose ratio lies outside
            `[1 / rs_threshold, rs_threshold]` (a sequence's ratio: the product over its tokens)
            are dropped from the mask (None: none dropped).

    Returns:
        `(weights, mask)`: weights (detached, 0 on padding) to multiply the per-token policy loss
        by, and the mask with rejected tokens removed.
    """
    weights = torch.where(mask.bool(), torch.ones(()), torch.zeros(())).float()
    if rollout_is is not None:
        ratio = _log_ratio(old_log_probs, rollout_log_probs, mask, rollout_is).exp()
        weights = weights * ratio.clamp(max=is_threshold)
    kept = mask
    if rollout_rs is not None:
        ratio = _log_ratio(old_log_probs, rollout_log_probs, mask, rollout_rs).exp()
        inside = (ratio <= rs_threshold) & (ratio >= 1.0 / rs_threshold)
        kept = mask * inside.to(mask.dtype)
        weights = weights * inside
    return weights.detach(), kept
