"""PPO losses: the clipped policy surrogate with dual clip, the clipped value loss, and aggregation;
the token-sum losses of interactive trainers (weighted cross-entropy, and Tinker's importance sampling,
ppo, cispo and dro)."""

from __future__ import annotations

import torch

from engine.algos.masked import masked_mean, masked_sum

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")

# exp(20) ~ 5e8: a bigger log-ratio only means the two policies disagree wildly, and exp would overflow.
_LOG_RATIO_LIMIT = 20.0


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    mode: str = "token-mean",
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss matrix to a scalar.

    Modes (`L` the loss, `m` the mask, `B` the batch size, `T` = `response_len`)::

        token-mean              sum_i,t L m / sum_i,t m             every token weighs the same
        seq-mean-token-sum      mean_i (sum_t L m)                  long answers weigh more
        seq-mean-token-mean     mean_i (sum_t L m / sum_t m)        every sequence weighs the same
        seq-mean-token-sum-norm mean_i (sum_t L m) / T              Dr. GRPO (arXiv:2503.20783)

    `seq-mean-token-mean` averages over rows that have at least one real token (an all-padding row
    would be 0/0). `seq-mean-token-sum-norm` is Dr. GRPO's `1/G sum_i sum_t L / MAX_TOKENS`, as
    VERL's `agg_loss` computes it now: a mean over sequences (a sum over them would grow the gradient
    with the batch size) of token sums divided by `loss_scale_factor`, which defaults to `T`; pass a
    constant (e.g. the max response length) so the scale does not change with the padded width of
    each batch, as the paper intends.

    Args:
        loss_mat: `(batch, response_len)`.
        loss_mask: `(batch, response_len)`.
        mode: one of `LOSS_AGG_MODES`.
        loss_scale_factor: the divisor for `seq-mean-token-sum-norm` only (default `response_len`).

    Returns:
        A scalar tensor (keeps grad).
    """
    if mode == "token-mean":
        return masked_mean(loss_mat, loss_mask)
    if mode == "seq-mean-token-sum":
        return masked_sum(loss_mat, loss_mask, dim=-1).mean()
    if mode == "seq-mean-token-mean":
        tokens = loss_mask.sum(dim=-1)
        seq_losses = masked_sum(loss_mat, loss_mask, dim=-1) / tokens.clamp(min=1)
        return masked_mean(seq_losses, tokens > 0)
    if mode == "seq-mean-token-sum-norm":
        scale = loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor
        return masked_sum(loss_mat, loss_mask, dim=-1).mean() / scale
    raise ValueError(f"unknown loss_agg_mode {mode!r}; valid: {', '.join(LOSS_AGG_MODES)}")


def policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate (Schulman et al. 2017, arXiv:1707.06347) with dual clip (Ye et al. 2020,
    arXiv:1912.09729).

    With `r = exp(clamp(log_prob - old_log_prob, -20, 20))`::

        L_clip = max(-A r, -A clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high))
        L      = min(L_clip, -A clip_ratio_c)   where A < 0   (dual clip)
        L      = L_clip                         where A >= 0

    The dual clip caps the loss of a negative-advantage token whose ratio has grown very large, so
    one stale sample cannot dominate the step. Separate low/high ranges allow DAPO's clip-higher.

    Args:
        old_log_prob: `(batch, response_len)` log-probs of the rollout policy.
        log_prob: `(batch, response_len)` log-probs of the current policy (with grad).
        advantages: `(batch, response_len)`.
        response_mask: `(batch, response_len)`.
        clip_ratio_low, clip_ratio_high: the trust region `[1 - low, 1 + high]`.
        clip_ratio_c: dual-clip bound, must be > 1.
        loss_agg_mode: see `agg_loss`.
        loss_scale_factor: see `agg_loss` (`seq-mean-token-sum-norm` with 1.0 is a plain token sum).

    Returns:
        `(loss, metrics)`: the scalar loss with grad, and floats
        `pg_clipfrac` (share of masked tokens where the trust-region clip was active),
        `ppo_kl` (masked mean of `old_log_prob - log_prob`, from the clamped log-ratio) and
        `pg_clipfrac_lower` (share of masked tokens where the dual clip bound).

    Raises:
        ValueError: `clip_ratio_c <= 1`.
    """
    if not clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for the dual clip, got {clip_ratio_c}")
    log_ratio = torch.clamp(log_prob - old_log_prob, -_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)

    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    loss_clip = torch.maximum(loss_unclipped, loss_clipped)
    loss_dual = torch.minimum(loss_clip, -advantages * clip_ratio_c)
    negative = advantages < 0
    loss_mat = torch.where(negative, loss_dual, loss_clip)
    loss = agg_loss(loss_mat, response_mask, loss_agg_mode, loss_scale_factor)

    with torch.no_grad():
        dual_bound = (loss_clip > -advantages * clip_ratio_c) & negative
        metrics = {
            "pg_clipfrac": masked_mean((loss_clipped > loss_unclipped).float(), response_mask).item(),
            "ppo_kl": masked_mean(-log_ratio, response_mask).item(),
            "pg_clipfrac_lower": masked_mean(dual_bound.float(), response_mask).item(),
        }
    return loss, metrics


def value_loss(
    vpreds: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss (PPO2 baselines; Schulman et al. 2017)::

        v_clip = values + clip(vpreds - values, -cliprange_value, cliprange_value)
        L      = 0.5 * max((vpreds - returns)^2, (v_clip - returns)^2)

    The clip keeps the critic near the values it had at rollout time, like the policy trust region.

    Args:
        vpreds: `(batch, response_len)` current critic predictions (with grad).
        values: `(batch, response_len)` critic values at rollout time.
        returns: `(batch, response_len)` targets (from `compute_gae`).
        response_mask: `(batch, response_len)`.
        cliprange_value: half-width of the allowed move.
        loss_agg_mode: see `agg_loss`.

    Returns:
        `(loss, metrics)`: the scalar loss with grad, and the float `vf_clipfrac` (share of masked
        tokens where the clipped error was the larger one).
    """
    vpreds_clipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    err_unclipped = (vpreds - returns) ** 2
    err_clipped = (vpreds_clipped - returns) ** 2
    loss = 0.5 * agg_loss(torch.maximum(err_unclipped, err_clipped), response_mask, loss_agg_mode)
    with torch.no_grad():
        clipfrac = masked_mean((err_clipped > err_unclipped).float(), response_mask).item()
    return loss, {"vf_clipfrac": clipfrac}


def cross_entropy_loss(log_prob: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted negative log-likelihood, summed over every token: `-sum_i,t w log p`.

    No normalisation: the weights carry it (e.g. `1 / tokens in the batch` for a token mean, as
    SFT's loss), so gradients accumulated over several calls add up like one call over all the data.

    Args:
        log_prob: `(batch, seq)` log-probs of the target tokens (with grad).
        weights: `(batch, seq)`; 0 on tokens that do not count (prompt, padding).

    Returns:
        A scalar tensor (keeps grad).
    """
    return -masked_sum(weights * log_prob, weights != 0)


def importance_sampling_loss(
    log_prob: torch.Tensor,
    sampler_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Off-policy-corrected REINFORCE, summed over tokens: `-sum_i,t r A` with
    `r = exp(clamp(log_prob - sampler_log_prob, -20, 20))`.

    The ratio corrects for the sampler's policy differing from the one being trained (a stale
    snapshot, another precision); without clipping, the gradient is unbiased for the current policy.

    Args:
        log_prob: `(batch, seq)` log-probs under the trained policy (with grad).
        sampler_log_prob: `(batch, seq)` log-probs the sampler gave the same tokens.
        advantages: `(batch, seq)`; 0 where a token does not count.
        mask: `(batch, seq)`; tokens that count (padding and zero-advantage tokens excluded).

    Returns:
        `(loss, metrics)`: the scalar loss with grad, and floats `ratio_mean` (masked mean of `r`)
        and `sampler_kl` (masked mean of `sampler_log_prob - log_prob`, an estimate of the KL from
        the sampler to the policy).
    """
    log_ratio = torch.clamp(log_prob - sampler_log_prob, -_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    loss = masked_sum(-ratio * advantages, mask)
    with torch.no_grad():
        metrics = {"ratio_mean": masked_mean(ratio, mask).item(), "sampler_kl": masked_mean(-log_ratio, mask).item()}
    return loss, metrics


# --- Tinker's policy-gradient losses (interactive trainers) ---------------------------------------------
#
# Each takes `(batch, seq)` tensors: `log_prob` (the trained policy's log-probs of the target tokens, with
# grad), `sampler_log_prob` (the sampler's, `q`), `advantages` and `mask` (the tokens that count), and
# returns `(loss, metrics)`: a scalar token SUM (no normalisation, as Tinker's; the caller's advantages
# carry any), and floats `ratio_mean` and `sampler_kl` over the mask. Definitions are Tinker's
# (tinker-docs.thinkingmachines.ai/tinker/losses), token by token, with `r = exp(log_prob - sampler_log_prob)`.


def _ratio(log_prob: torch.Tensor, sampler_log_prob: torch.Tensor,
           mask: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    log_ratio = torch.clamp(log_prob - sampler_log_prob, -_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    with torch.no_grad():
        metrics = {"ratio_mean": masked_mean(ratio, mask).item(), "sampler_kl": masked_mean(-log_ratio, mask).item()}
    return ratio, metrics


def ppo_threshold_loss(log_prob: torch.Tensor, sampler_log_prob: torch.Tensor, advantages: torch.Tensor,
                       mask: torch.Tensor, clip_low_threshold: float = 0.8,
                       clip_high_threshold: float = 1.2) -> tuple[torch.Tensor, dict[str, float]]:
    """Tinker's `ppo`: `-sum min(r A, clamp(r, clip_low_threshold, clip_high_threshold) A)`.

    The thresholds are absolute ratios (not VERL's `1 -/+ clip_ratio`), and there is no dual clip:
    with `A < 0` and `r` above the upper threshold the unclipped term `r A` is the minimum, so the
    loss is `-r A` with gradient `-r A` per unit of log-prob (VERL's dual clip would cap it at
    `clip_ratio_c * |A|` with no gradient). Metric `clipfrac`: share of tokens where the clipped
    term was the minimum and differed from the unclipped one (no gradient there).

    Args:
        log_prob, sampler_log_prob, advantages, mask: `(batch, seq)`, as the section's note says.

    Returns:
        `(loss, metrics)`: the scalar token sum with grad, and floats `ratio_mean` and `sampler_kl` and
        `clipfrac`.
    """
    ratio, metrics = _ratio(log_prob, sampler_log_prob, mask)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, clip_low_threshold, clip_high_threshold) * advantages
    loss = masked_sum(-torch.minimum(unclipped, clipped), mask)
    with torch.no_grad():
        metrics["clipfrac"] = masked_mean((clipped < unclipped).float(), mask).item()
    return loss, metrics


def cispo_loss(log_prob: torch.Tensor, sampler_log_prob: torch.Tensor, advantages: torch.Tensor,
               mask: torch.Tensor, clip_low_threshold: float = 0.0,
               clip_high_threshold: float = 4.0) -> tuple[torch.Tensor, dict[str, float]]:
    """Tinker's `cispo`: `-sum sg(clamp(r, clip_low_threshold, clip_high_threshold)) log_prob A`.

    The clipped ratio is a detached coefficient, so no token's gradient is ever zeroed; Tinker's
    default clips only above (0.0, 4.0).

    Args:
        log_prob, sampler_log_prob, advantages, mask: `(batch, seq)`, as the section's note says.

    Returns:
        `(loss, metrics)`: the scalar token sum with grad, and floats `ratio_mean` and `sampler_kl`.
    """
    ratio, metrics = _ratio(log_prob, sampler_log_prob, mask)
    coefficient = torch.clamp(ratio, clip_low_threshold, clip_high_threshold).detach()
    return masked_sum(-coefficient * log_prob * advantages, mask), metrics


def dro_loss(log_prob: torch.Tensor, sampler_log_prob: torch.Tensor, advantages: torch.Tensor,
             mask: torch.Tensor, beta: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Tinker's `dro`: `-sum (log_prob A - beta / 2 (log_prob - sampler_log_prob)^2)`.

    Args:
        log_prob, sampler_log_prob, advantages, mask: `(batch, seq)`, as the section's note says.

    Returns:
        `(loss, metrics)`: the scalar token sum with grad, and floats `ratio_mean` and `sampler_kl`.
    """
    _, metrics = _ratio(log_prob, sampler_log_prob, mask)
    objective = log_prob * advantages - 0.5 * beta * (log_prob - sampler_log_prob) ** 2
    return masked_sum(-objective, mask), metrics
