"""Entropy and log-probs from logits."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.algos import entropy_from_logits, log_probs_from_logits

SETTINGS = settings(max_examples=30, deadline=None)


def test_entropy_hand_computed():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), -1e4, -1e4]]])
    h = entropy_from_logits(logits)
    assert h.shape == (1, 2)
    # uniform over 4: log 4; [1/4, 3/4]: -(.25 ln .25 + .75 ln .75)
    assert h[0].tolist() == pytest.approx([math.log(4), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))])


def test_entropy_is_stable_for_extreme_logits():
    h = entropy_from_logits(torch.tensor([[1000.0, 0.0, 0.0], [1e4, -1e4, 5e3]]))
    assert torch.isfinite(h).all()
    assert h.tolist() == pytest.approx([0.0, 0.0], abs=1e-6)


def test_log_probs_hand_computed():
    logits = torch.tensor([[[0.0, math.log(3.0)], [5.0, 5.0]]])
    labels = torch.tensor([[1, 0]])
    assert log_probs_from_logits(logits, labels)[0].tolist() == pytest.approx([math.log(0.75), math.log(0.5)])


def test_log_probs_are_stable_for_extreme_logits():
    logits = torch.tensor([[1000.0, -1000.0]])
    out = log_probs_from_logits(logits, torch.tensor([0]))
    assert out.item() == 0.0
    assert log_probs_from_logits(logits, torch.tensor([1])).item() == pytest.approx(-2000.0)


@st.composite
def logit_batches(draw):
    batch, length, vocab = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(2, 7))
    n = batch * length * vocab
    logits = torch.tensor(draw(st.lists(st.floats(-20, 20), min_size=n, max_size=n)), dtype=torch.float64)
    labels = draw(st.lists(st.integers(0, vocab - 1), min_size=batch * length, max_size=batch * length))
    return logits.reshape(batch, length, vocab), torch.tensor(labels).reshape(batch, length)


@SETTINGS
@given(logit_batches(), st.floats(-50, 50))
def test_match_log_softmax_and_are_shift_invariant(data, shift):
    logits, labels = data
    log_p = torch.log_softmax(logits, dim=-1)
    expected_h = -(log_p.exp() * log_p).sum(-1)
    h = entropy_from_logits(logits)
    assert torch.allclose(h, expected_h, atol=1e-9)
    assert (h >= -1e-9).all() and (h <= math.log(logits.shape[-1]) + 1e-9).all()
    assert torch.allclose(entropy_from_logits(logits + shift), h, atol=1e-9)

    lp = log_probs_from_logits(logits, labels)
    assert torch.allclose(lp, log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1), atol=1e-9)
    assert torch.allclose(log_probs_from_logits(logits + shift, labels), lp, atol=1e-9)


def test_log_probs_gradient_matches_log_softmax():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    labels = torch.tensor([[0, 4, 2], [1, 1, 3]])
    a = logits.clone().requires_grad_()
    log_probs_from_logits(a, labels).sum().backward()
    b = logits.clone().requires_grad_()
    torch.log_softmax(b, -1).gather(-1, labels.unsqueeze(-1)).sum().backward()
    assert torch.allclose(a.grad, b.grad)


def test_log_probs_and_entropy_equal_the_separate_functions():
    from engine.algos import log_probs_and_entropy

    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 40, generator=gen) * 4).requires_grad_()
    labels = torch.randint(0, 40, (3, 5), generator=gen)
    expected_lp, expected_h = log_probs_from_logits(logits, labels), entropy_from_logits(logits)
    for grad in (True, False):
        lp, h = log_probs_and_entropy(logits, labels, entropy_grad=grad)
        torch.testing.assert_close(lp, expected_lp)
        torch.testing.assert_close(h, expected_h)
        assert lp.requires_grad and h.requires_grad == grad
        weights = torch.randn(3, 5, generator=gen)
        got = torch.autograd.grad((lp * weights).sum() + (h.sum() if grad else 0.0), logits)[0]
        want = torch.autograd.grad((expected_lp * weights).sum() + (expected_h.sum() if grad else 0.0), logits,
                                   retain_graph=True)[0]
        torch.testing.assert_close(got, want)
    lp, h = log_probs_and_entropy(torch.tensor([[1000.0, 0.0, 0.0], [1e4, -1e4, 5e3]]), torch.tensor([0, 2]))
    assert torch.isfinite(lp).all() and torch.isfinite(h).all()
