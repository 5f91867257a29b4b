"""RLOO, REINFORCE++ (+ baseline) and ReMax: hand-computed cases, and agreement with a per-row loop
that follows VERL's `compute_*_outcome_advantage` definitions on random batches."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch

from engine.algos import (
    compute_reinforce_plus_plus_advantages,
    compute_reinforce_plus_plus_baseline_advantages,
    compute_remax_advantages,
    compute_rloo_advantages,
    masked_whiten,
)


def _outcome(scores: list[float], length: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards with each score on the last token of a full-length response."""
    rewards = torch.zeros(len(scores), length)
    rewards[:, -1] = torch.tensor(scores)
    return rewards, torch.ones(len(scores), length)


def test_rloo_leaves_one_out():
    rewards, mask = _outcome([1.0, 0.0, 0.0, 2.0])
    adv, returns = compute_rloo_advantages(rewards, mask, ["a", "a", "a", "b"])
    # a: each baseline is the mean of the other two (0, 0.5, 0.5); b is alone and keeps its score.
    assert adv[:, 0].tolist() == pytest.approx([1.0, -0.5, -0.5, 2.0])
    assert torch.equal(adv, returns) and torch.all(adv == adv[:, :1])


def test_rloo_zeroes_padding():
    rewards = torch.tensor([[0.0, 3.0, 0.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    adv, _ = compute_rloo_advantages(rewards, mask, torch.tensor([7, 7]))
    assert adv.tolist() == [[2.0, 2.0, 0.0], [-2.0, 0.0, 0.0]]  # 2/1 * (3 - 2), 2/1 * (1 - 2)


def test_reinforce_plus_plus_discounts_and_resets_after_each_response():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, returns = compute_reinforce_plus_plus_advantages(rewards, mask, gamma=0.5)
    # row 1: 0.25, 0.5, 1; row 2: the padding reward 5 does not leak into the real tokens.
    assert returns[0].tolist() == [0.25, 0.5, 1.0]
    assert returns[1, :2].tolist() == [0.5, 1.0]
    real = torch.tensor([0.25, 0.5, 1.0, 0.5, 1.0])
    expected = (real - real.mean()) / math.sqrt(real.var().item() + 1e-8)
    assert adv[mask.bool()].tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    assert adv[1, 2] == 0


def test_reinforce_plus_plus_baseline_centres_then_whitens():
    rewards, mask = _outcome([1.0, 3.0, 5.0], length=2)
    adv, returns = compute_reinforce_plus_plus_baseline_advantages(rewards, mask, [0, 0, 1])
    centred = torch.tensor([-1.0, -1.0, 1.0, 1.0, 5.0, 5.0])  # group 0 mean 2; group 1 alone keeps 5
    expected = (centred - centred.mean()) / math.sqrt(centred.var().item() + 1e-8)
    assert adv.reshape(-1).tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    assert torch.equal(adv, returns)


def test_remax_subtracts_the_greedy_score():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, returns = compute_remax_advantages(rewards, torch.tensor([0.5, 2.0]), mask)
    assert returns.tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    assert adv.tolist() == [[0.5, 0.5, 0.5], [-1.0, -1.0, 0.0]]


# --- the same definitions written as VERL writes them: a dict of scores per prompt, a loop per row ---

def _loop_group_mean(scores, index):
    groups = defaultdict(list)
    for i, g in enumerate(index):
        groups[g].append(scores[i])
    return groups, {g: (torch.stack(v).mean() if len(v) > 1 else torch.tensor(0.0)) for g, v in groups.items()}


def _loop_rloo(rewards, mask, index):
    scores = rewards.sum(-1)
    groups, mean = _loop_group_mean(scores, index)
    out = scores.clone()
    for i, g in enumerate(index):
        n = len(groups[g])
        if n > 1:
            out[i] = scores[i] * n / (n - 1) - mean[g] * n / (n - 1)
    return out.unsqueeze(-1) * mask


def _loop_rfpp_baseline(rewards, mask, index):
    scores = rewards.sum(-1)
    _, mean = _loop_group_mean(scores, index)
    out = torch.stack([scores[i] - mean[g] for i, g in enumerate(index)])
    out = out.unsqueeze(-1).tile([1, rewards.shape[1]]) * mask
    return masked_whiten(out, mask) * mask


def _random_batch(seed: int):
    gen = torch.Generator().manual_seed(seed)
    batch, length = 12, 7
    lengths = torch.randint(1, length + 1, (batch,), generator=gen)
    mask = (torch.arange(length) < lengths[:, None]).float()
    rewards = torch.zeros(batch, length)
    rewards[torch.arange(batch), lengths - 1] = torch.randn(batch, generator=gen)
    rewards += 0.1 * torch.randn(batch, length, generator=gen) * mask  # per-token KL-like terms
    index = torch.randint(0, 4, (batch,), generator=gen).tolist()
    return rewards, mask, index


@pytest.mark.parametrize("seed", range(5))
def test_match_per_row_loops(seed):
    rewards, mask, index = _random_batch(seed)
    assert compute_rloo_advantages(rewards, mask, index)[0] == pytest.approx(_loop_rloo(rewards, mask, index),
                                                                              abs=1e-5)
    got = compute_reinforce_plus_plus_baseline_advantages(rewards, mask, index)[0]
    assert got == pytest.approx(_loop_rfpp_baseline(rewards, mask, index), abs=1e-5)


def test_overlong_penalty_is_linear_in_the_buffer():
    from engine.algos import overlong_penalty

    lengths = torch.tensor([10, 12, 14, 16])
    penalty = overlong_penalty(lengths, max_response_length=16, buffer_len=4, penalty_factor=2.0)
    assert penalty.tolist() == [0.0, 0.0, -1.0, -2.0]  # free up to 12, -2 at the limit


def test_group_has_signal_drops_groups_that_all_tie():
    from engine.algos import group_has_signal

    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 7.0])
    keep = group_has_signal(scores, ["a", "a", "b", "b", "c", "c", "d"])
    assert keep.tolist() == [False, False, True, True, False, False, False]
