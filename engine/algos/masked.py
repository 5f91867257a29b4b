"""Statistics over the masked (real-token) entries of a batch.

Every function takes `mask` of the same shape as the values, 1 (or True) on real response tokens and
0 on padding. Values under the mask's zeros never reach the result, not even as NaN or inf.
"""

from __future__ import annotations

import torch

# Guards divisions by a mask count that may be zero (an all-padding row); small enough to be exact
# for any realistic token count.
_COUNT_EPS = 1e-8


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of `x` over entries where `mask` is set.

    Args:
        x: `(batch, response_len)` (any shape).
        mask: same shape as `x`; nonzero marks a real token.
        dim: reduce this dimension only; `None` reduces everything to a scalar.

    Returns:
        `x.sum()` restricted to the mask: a scalar, or `x.shape` without `dim`.
    """
    # where() rather than multiply: 0 * nan is nan, and padding may hold anything.
    masked = torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return masked.sum() if dim is None else masked.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `x` over masked entries: `sum(x * mask) / (sum(mask) + 1e-8)`.

    Args:
        x: `(batch, response_len)` (any shape).
        mask: same shape as `x`.
        dim: reduce this dimension only (e.g. `-1` for a per-sequence mean); `None` for the whole batch.

    Returns:
        A scalar, or `x.shape` without `dim`. A row with no masked entries gives 0, not NaN.
    """
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(x, mask, dim) / (count + _COUNT_EPS)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of `x` over all masked entries of the batch.

    `var = mean_m((x - mean_m(x))^2)`, times Bessel's correction `n / (n - 1)` when `unbiased`,
    with `n = sum(mask)`.

    Args:
        x: `(batch, response_len)` (any shape).
        mask: same shape as `x`.
        unbiased: apply Bessel's correction.

    Returns:
        A scalar tensor.

    Raises:
        ValueError: `unbiased` and the mask selects fewer than 2 entries (the correction would divide
            by zero; use a larger batch).
    """
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        n = float(mask.sum().item())
        if n < 2:
            raise ValueError(
                f"masked_var(unbiased=True) needs at least 2 masked entries, got {n:g}; "
                "use a larger batch"
            )
        var = var * (n / (n - 1))
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise `x` to masked mean 0 and masked variance 1: `(x - mean) / sqrt(var + 1e-8)`.

    Mean and unbiased variance are taken over the masked entries of the whole batch. Every position is
    transformed, padding included; callers mask the result where it matters.

    Args:
        x: `(batch, response_len)` (any shape).
        mask: same shape as `x`.
        shift_mean: if False, add the mean back (scale only, as for rewards).

    Returns:
        Tensor shaped like `x`.

    Raises:
        ValueError: the mask selects fewer than 2 entries (see `masked_var`).
    """
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    whitened = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """Share of the return variance the critic explains: `1 - Var(returns - values) / Var(returns)`.

    The `critic/vf_explained_var` metric (CleanRL `explained_var`): 1 is a perfect critic, 0 is no
    better than a constant, negative is worse. Variances are unbiased, over masked entries; 1e-5 is
    added to the denominator so constant returns do not divide by zero.

    Args:
        values: `(batch, response_len)` critic predictions.
        returns: `(batch, response_len)` targets.
        mask: `(batch, response_len)` response mask.

    Returns:
        A Python float; NaN when fewer than 2 entries are masked (the metric is undefined there).
    """
    if mask.sum().item() < 2:
        return float("nan")
    values, returns = values.detach(), returns.detach()
    diff_var = masked_var(returns - values, mask)
    return_var = masked_var(returns, mask)
    return float((1.0 - diff_var / (return_var + 1e-5)).item())


def last_index(mask: torch.Tensor) -> torch.Tensor:
    """Where a sequence score goes: each row's last 1. Not `mask.sum(-1) - 1`: a multi-turn episode's
    mask has holes (the environment's tokens) before its last sampled token.

    Args:
        mask: `(batch, response_len)`.

    Returns:
        `(batch,)` long: the index of each row's last 1 (0 for an all-zero row).
    """
    positions = torch.arange(mask.shape[-1], device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), positions, 0).amax(dim=-1)
