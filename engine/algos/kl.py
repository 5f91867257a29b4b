"""KL between the policy and the reference model: per-token estimators, the in-reward penalty, and the
controllers that set its coefficient."""

from __future__ import annotations

from typing import Any

import torch

KL_KINDS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")

# The k3 estimator is exp(d) - d - 1: exp overflows past ~88 in float32, and a token that far from the
# reference only needs a big, bounded penalty.
_K3_LOG_RATIO_LIMIT = 20.0
_K3_LIMIT = 10.0


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str = "kl") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled-token log-probs (Schulman, "Approximating
    KL Divergence", 2020). With `d = log_prob - ref_log_prob`:

        kl / k1          d                                   unbiased, high variance, can be < 0
        abs              |d|
        mse / k2         0.5 * d^2
        low_var_kl / k3  exp(-d) + d - 1, clamped to [-10, 10]   unbiased, low variance, >= 0

    Args:
        log_prob: `(batch, response_len)` log-probs of the sampled tokens under the policy.
        ref_log_prob: `(batch, response_len)` the same under the reference model.
        kind: one of `KL_KINDS`.

    Returns:
        `(batch, response_len)` per-token KL; padding positions are not masked.

    Raises:
        ValueError: unknown `kind`.
    """
    diff = log_prob - ref_log_prob
    if kind in ("kl", "k1"):
        return diff
    if kind == "abs":
        return diff.abs()
    if kind in ("mse", "k2"):
        return 0.5 * diff.square()
    if kind in ("low_var_kl", "k3"):
        ref_minus = torch.clamp(-diff, -_K3_LOG_RATIO_LIMIT, _K3_LOG_RATIO_LIMIT)
        return torch.clamp(torch.exp(ref_minus) - ref_minus - 1, -_K3_LIMIT, _K3_LIMIT)
    raise ValueError(f"unknown kl penalty {kind!r}; valid: {', '.join(KL_KINDS)}")


def apply_kl_in_reward(
    token_level_scores: torch.Tensor,
    kl: torch.Tensor,
    kl_coef: float,
    response_mask: torch.Tensor,
) -> torch.Tensor:
    """Fold the KL penalty into the reward (Ziegler et al. 2019, arXiv:1909.08593):
    `r_t = score_t - kl_coef * kl_t * mask_t`.

    Padding keeps its score and gets no penalty. The controller's `current_kl` is then, as in VERL,
    the batch mean of per-sequence means: `masked_mean(kl, response_mask, dim=-1).mean()`.

    Args:
        token_level_scores: `(batch, response_len)`, e.g. the RM score on the last real token.
        kl: `(batch, response_len)` from `kl_penalty`.
        kl_coef: beta, usually `controller.value`.
        response_mask: `(batch, response_len)`.

    Returns:
        `token_level_rewards`, `(batch, response_len)`.
    """
    # where(), not a multiply: padding KL may be NaN/inf (e.g. -inf log-probs of pad tokens).
    masked_kl = torch.where(response_mask.bool(), kl, torch.zeros((), dtype=kl.dtype, device=kl.device))
    return token_level_scores - kl_coef * masked_kl


class FixedKLController:
    """A constant KL coefficient; `update` does nothing.

    Args:
        kl_coef: beta.
    """

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op, so the driver loop can call `update` whatever the controller."""

    def state_dict(self) -> dict[str, Any]:
        """The coefficient, for checkpoints."""
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the coefficient saved by `state_dict`."""
        self.value = float(state["value"])


class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al. 2019, arXiv:1909.08593, section 2.2).

    Each update moves beta towards the value that makes the observed KL hit `target_kl`::

        e     = clip(current_kl / target_kl - 1, -0.2, 0.2)
        beta *= 1 + e * n_steps / horizon

    `state_dict` carries beta so a resumed job continues where it stopped instead of restarting from
    `init_kl_coef`.

    Args:
        init_kl_coef: the starting beta.
        target_kl: the KL per step to aim for (> 0).
        horizon: the number of samples over which the error is corrected (> 0).
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"target_kl and horizon must be > 0, got {target_kl} and {horizon}")
        self.value = float(init_kl_coef)
        self.target_kl = float(target_kl)
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adjust beta after a batch of `n_steps` samples whose mean KL was `current_kl`."""
        # +-0.2 bounds how fast beta can move on one noisy KL estimate.
        error = min(max(float(current_kl) / self.target_kl - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, Any]:
        """The current coefficient, for checkpoints (target and horizon come from the config)."""
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the coefficient saved by `state_dict`."""
        self.value = float(state["value"])
