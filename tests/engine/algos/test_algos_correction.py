"""engine.algos.correction: the rollout/trainer log-prob gap and its importance weights (TIS, MIS)."""

from __future__ import annotations

import math

import pytest
import torch

from engine.algos.correction import logprob_gap, rollout_correction

MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
OLD = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-1.0, -1.0, 0.0, 0.0]])
# row 0: token 1 is 3x likelier for the trainer than the sampler (log 3), token 2 half as likely
ROLLOUT = torch.tensor([[-1.0, -2.0 - math.log(3.0), -0.5 + math.log(2.0), 9.0], [-1.0, -1.0, 0.0, 5.0]])


def test_logprob_gap_reads_real_tokens_only():
    mean, top = logprob_gap(ROLLOUT, OLD, MASK)
    assert top == pytest.approx(math.log(3.0))
    assert mean == pytest.approx((math.log(3.0) + math.log(2.0)) / 5)
    assert logprob_gap(ROLLOUT, OLD, torch.zeros_like(MASK)) == (0.0, 0.0)


def test_no_correction_is_plain_mask():
    weights, kept = rollout_correction(OLD, ROLLOUT, MASK)
    assert torch.equal(weights, MASK.float()) and torch.equal(kept, MASK)


def test_truncated_is_token_and_sequence():
    weights, kept = rollout_correction(OLD, ROLLOUT, MASK, rollout_is="token", is_threshold=2.0)
    expected = torch.tensor([[1.0, 2.0, 0.5, 0.0], [1.0, 1.0, 0.0, 0.0]])  # 3 capped at 2; padding 0
    torch.testing.assert_close(weights, expected)
    assert torch.equal(kept, MASK)
    seq, _ = rollout_correction(OLD, ROLLOUT, MASK, rollout_is="sequence", is_threshold=10.0)
    torch.testing.assert_close(seq, torch.tensor([[1.5, 1.5, 1.5, 0.0], [1.0, 1.0, 0.0, 0.0]]))


def test_masked_is_rejects_tokens_or_sequences_outside_the_band():
    weights, kept = rollout_correction(OLD, ROLLOUT, MASK, rollout_rs="token", rs_threshold=2.5)
    assert kept.tolist() == [[1, 0, 1, 0], [1, 1, 0, 0]]  # ratio 3 out, ratio 0.5 in [0.4, 2.5]
    assert weights.tolist() == [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    _, seq = rollout_correction(OLD, ROLLOUT, MASK, rollout_rs="sequence", rs_threshold=1.4)
    assert seq.tolist() == [[0, 0, 0, 0], [1, 1, 0, 0]]  # row 0's product 1.5 is outside [1/1.4, 1.4]


def test_weights_are_bounded_and_detached():
    old = torch.tensor([[100.0]], requires_grad=True)
    weights, _ = rollout_correction(old, torch.tensor([[-100.0]]), torch.ones(1, 1), rollout_is="token",
                                    is_threshold=1e30)
    assert math.isfinite(float(weights)) and not weights.requires_grad
