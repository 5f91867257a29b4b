"""Advantage estimators: GAE for PPO with a critic, group-relative outcome advantages for GRPO."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from engine.algos.masked import masked_whiten


def compute_gae(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438).

    Reverse recursion over the response, vectorised over the batch::

        delta_t = r_t + gamma * V_{t+1} - V_t
        A_t     = delta_t + gamma * lam * A_{t+1}

    where `t+1` is the next *masked* token: positions with `response_mask == 0` are skipped and the
    running `V_{t+1}` and `A_{t+1}` are carried through them unchanged (so a masked span inside a
    response, e.g. tool output, does not break the chain). After the last real token the bootstrap
    value is 0. `returns = A + V` uses the raw advantages; the advantages are then whitened
    (`masked_whiten`) over all masked tokens of the batch.

    Edge cases:
        * A row with a single real token: `A = r - V`, `returns = r` (before whitening).
        * An all-masked row: raw advantages 0, `returns = values`; it adds nothing to the whitening
          statistics and its outputs are meaningless (callers mask them).
        * Padding positions hold the carried state, not 0: always read results under the mask.
        * Fewer than 2 real tokens in the whole batch: `ValueError` (the variance is undefined).

    Args:
        token_level_rewards: `(batch, response_len)`, e.g. the score on the last token minus KL.
        values: `(batch, response_len)` critic values `V(s_t)`.
        response_mask: `(batch, response_len)`, 1 on real response tokens (EOS included).
        gamma: discount factor.
        lam: GAE lambda (bias/variance trade-off).

    Returns:
        `(advantages, returns)`, both `(batch, response_len)`, without grad.
    """
    with torch.no_grad():
        batch, length = token_level_rewards.shape
        real = response_mask.bool()
        next_value = values.new_zeros(batch)
        last_gae = values.new_zeros(batch)
        raw = torch.empty_like(values)
        for t in reversed(range(length)):
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            gae = delta + gamma * lam * last_gae
            # where(), not a 0/1 blend: NaN or inf in padding must not leak into the chain.
            next_value = torch.where(real[:, t], values[:, t], next_value)
            last_gae = torch.where(real[:, t], gae, last_gae)
            raw[:, t] = last_gae
        returns = raw + values
        advantages = masked_whiten(raw, response_mask)
    return advantages, returns


def _group_ids(group_index: torch.Tensor | Sequence[Any], batch: int, device: torch.device) -> torch.Tensor:
    """Map any per-row group labels (tensor, list of uids, numpy array) to dense ids `0..G-1`."""
    if isinstance(group_index, torch.Tensor):
        ids = torch.unique(group_index.reshape(-1), return_inverse=True)[1].to(device)
    else:
        seen: dict[Any, int] = {}
        ids = torch.tensor([seen.setdefault(g, len(seen)) for g in group_index], device=device)
    if ids.numel() != batch:
        raise ValueError(f"group_index has {ids.numel()} entries for a batch of {batch}")
    return ids


def compute_grpo_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: torch.Tensor | Sequence[Any],
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative outcome advantages (GRPO, Shao et al. 2024, arXiv:2402.03300).

    Each response's outcome score is `s_i = sum_t r_{i,t}` over its real tokens (VERL sums every
    position; the same when padding rewards are 0, as they are there). Within the group of
    responses to the same prompt::

        A_i = (s_i - mean_g) / (std_g + eps)      if norm_by_std  (GRPO)
        A_i =  s_i - mean_g                       otherwise       (Dr. GRPO, arXiv:2503.20783)

    with the unbiased standard deviation. A group of one keeps `mean = 0`, `std = 1` (its advantage is
    its score, up to `eps`); a group whose scores are all equal gets advantage 0. `A_i` is broadcast to
    every real token of response `i`; padding gets 0.

    Args:
        token_level_rewards: `(batch, response_len)`.
        response_mask: `(batch, response_len)`.
        group_index: `(batch,)` prompt id per row: an integer tensor, or any sequence of hashable
            labels (uid strings, a numpy array).
        eps: added to the std so a constant group does not divide by zero.
        norm_by_std: divide by the group std (False for Dr. GRPO).

    Returns:
        `(advantages, returns)`, both `(batch, response_len)` and equal, without grad.
    """
    with torch.no_grad():
        batch = token_level_rewards.shape[0]
        ids = _group_ids(group_index, batch, token_level_rewards.device)
        # float64 group statistics: a constant group then has a mean exactly equal to its scores,
        # so its advantage is exactly 0 rather than (1-ulp error) / eps.
        mask = response_mask.bool()
        scores = torch.where(mask, token_level_rewards, 0).sum(dim=-1).double()
        groups = int(ids.max().item()) + 1 if batch else 0
        count = scores.new_zeros(groups).index_add_(0, ids, torch.ones_like(scores))
        mean = scores.new_zeros(groups).index_add_(0, ids, scores) / count
        sq_dev = scores.new_zeros(groups).index_add_(0, ids, (scores - mean[ids]) ** 2)
        std = (sq_dev / (count - 1).clamp(min=1)).sqrt()
        single = count < 2
        mean = torch.where(single, 0.0, mean)
        std = torch.where(single, 1.0, std)
        adv = scores - mean[ids]
        if norm_by_std:
            adv = adv / (std[ids] + eps)
        adv = adv.to(token_level_rewards.dtype).unsqueeze(-1) * mask
    return adv, adv.clone()
