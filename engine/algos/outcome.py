"""Critic-free outcome advantage estimators beside GRPO: RLOO, REINFORCE++ (with and without a group
baseline) and ReMax. Each matches VERL's `compute_*_outcome_advantage` of the same name value for
value (VERL sums the rewards over every position; the same here, since padding rewards are 0)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from engine.algos.advantages import _group_ids
from engine.algos.masked import masked_whiten


def _group_stats(scores: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row group size and group mean of `scores` (float64: a constant group's mean is exact)."""
    groups = int(ids.max().item()) + 1 if ids.numel() else 0
    count = scores.new_zeros(groups).index_add_(0, ids, torch.ones_like(scores))
    mean = scores.new_zeros(groups).index_add_(0, ids, scores) / count
    return count[ids], mean[ids]


def compute_rloo_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: torch.Tensor | Sequence[Any],
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE Leave-One-Out (Ahmadian et al. 2024, arXiv:2402.14740).

    With `s_i = sum_t r_{i,t}` and a group of `n` responses to the same prompt, the baseline of
    response `i` is the mean of the *other* `n - 1` scores::

        A_i = s_i - (sum_g - s_i) / (n - 1) = n / (n - 1) * (s_i - mean_g)

    A group of one keeps its raw score. `A_i` is broadcast to every real token; padding gets 0. No
    whitening.

    Args:
        token_level_rewards: `(batch, response_len)`.
        response_mask: `(batch, response_len)`.
        group_index: `(batch,)` prompt id per row (tensor or sequence of hashable labels).
        eps: unused; kept for VERL's signature.

    Returns:
        `(advantages, returns)`, both `(batch, response_len)` and equal, without grad.
    """
    del eps
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1).double()
        ids = _group_ids(group_index, scores.shape[0], scores.device)
        n, mean = _group_stats(scores, ids)
        loo = torch.where(n > 1, (scores - mean) * n / (n - 1).clamp(min=1), scores)
        adv = loo.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
    return adv, adv.clone()


def compute_reinforce_plus_plus_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025, arXiv:2501.03262): discounted returns, whitened over the batch.

    Reverse recursion ``G_t = r_t + gamma * G_{t+1}``, with the running return reset to 0 after every
    padding position (so each response's return starts at its own last token). The advantages are the
    returns whitened over all real tokens of the batch, 0 on padding.

    Args:
        token_level_rewards: `(batch, response_len)` (score on the last token, minus KL if in reward).
        response_mask: `(batch, response_len)`.
        gamma: discount factor.

    Returns:
        `(advantages, returns)`, both `(batch, response_len)`, without grad.
    """
    with torch.no_grad():
        returns = torch.zeros_like(token_level_rewards)
        running = token_level_rewards.new_zeros(token_level_rewards.shape[0])
        for t in reversed(range(token_level_rewards.shape[1])):
            running = token_level_rewards[:, t] + gamma * running
            returns[:, t] = running
            running = running * response_mask[:, t]
        advantages = masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


def compute_reinforce_plus_plus_baseline_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: torch.Tensor | Sequence[Any],
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline (arXiv:2501.03262): ``s_i - mean_g`` (a group of one
    keeps its score), broadcast to the real tokens, then whitened over all real tokens of the batch.

    Args:
        token_level_rewards: `(batch, response_len)`.
        response_mask: `(batch, response_len)`.
        group_index: `(batch,)` prompt id per row.
        eps: unused; kept for VERL's signature.

    Returns:
        `(advantages, returns)`, both `(batch, response_len)` and equal, without grad.
    """
    del eps
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1).double()
        ids = _group_ids(group_index, scores.shape[0], scores.device)
        n, mean = _group_stats(scores, ids)
        centred = torch.where(n > 1, scores - mean, scores).to(token_level_rewards.dtype)
        adv = centred.unsqueeze(-1) * response_mask
        adv = masked_whiten(adv, response_mask) * response_mask
    return adv, adv.clone()


def compute_remax_advantages(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (Li et al. 2023, arXiv:2310.10505): the return-to-go minus the score of a greedy response
    to the same prompt.

    ``returns_t = sum_{k >= t} r_k * mask_k`` and ``A_t = returns_t - b * mask_t``, where `b` is the
    reward of the greedy (argmax) rollout. No whitening.

    Args:
        token_level_rewards: `(batch, response_len)`.
        reward_baselines: `(batch,)` the greedy response's score for each row's prompt.
        response_mask: `(batch, response_len)`.

    Returns:
        `(advantages, returns)`, both `(batch, response_len)`, without grad.
    """
    with torch.no_grad():
        returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
        advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages, returns


def overlong_penalty(
    response_lengths: torch.Tensor,
    max_response_length: int,
    buffer_len: int,
    penalty_factor: float,
) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv:2503.14476), added to each score.

    Responses up to ``L_max - buffer_len`` tokens are free; beyond it the penalty grows linearly::

        penalty = min(0, -(length - (L_max - buffer_len)) / buffer_len * penalty_factor)

    reaching ``-penalty_factor`` at ``L_max`` (a truncated response).

    Args:
        response_lengths: `(batch,)` real response tokens per row.
        max_response_length: `L_max`, the generation limit.
        buffer_len: tokens before `L_max` where the penalty starts (> 0).
        penalty_factor: the penalty at `L_max`.

    Returns:
        `(batch,)` float penalties, all <= 0.
    """
    exceed = response_lengths.float() - (max_response_length - buffer_len)
    return torch.clamp(-exceed / buffer_len * penalty_factor, max=0.0)


def group_has_signal(scores: torch.Tensor, group_index: torch.Tensor | Sequence[Any]) -> torch.Tensor:
    """Rows whose group's scores are not all equal (DAPO dynamic sampling keeps only these: a group
    that all succeeded or all failed gets zero group-relative advantage).

    Args:
        scores: `(batch,)` sequence scores.
        group_index: `(batch,)` prompt id per row.

    Returns:
        `(batch,)` bool.
    """
    ids = _group_ids(group_index, scores.shape[0], scores.device)
    groups = int(ids.max().item()) + 1 if ids.numel() else 0
    values = scores.double()
    low = values.new_full((groups,), math.inf).scatter_reduce(0, ids, values, "amin")
    high = values.new_full((groups,), -math.inf).scatter_reduce(0, ids, values, "amax")
    return (high > low)[ids]
