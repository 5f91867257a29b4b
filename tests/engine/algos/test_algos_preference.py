"""engine.algos.preference: DPO, conservative DPO and IPO against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from engine.algos import dpo_loss


def _pair(pc=-1.0, pr=-3.0, rc=-2.0, rr=-2.0, grad=False):
    # h = (pc - rc) - (pr - rr) = (-1 + 2) - (-3 + 2) = 2
    policy = torch.tensor([pc, pr], dtype=torch.float64, requires_grad=grad)
    return policy, policy[:1], policy[1:], torch.tensor([rc], dtype=torch.float64), torch.tensor([rr],
                                                                                              dtype=torch.float64)


def test_sigmoid_is_dpo_by_hand():
    _, pc, pr, rc, rr = _pair()
    losses, chosen, rejected = dpo_loss(pc, pr, rc, rr, beta=0.5)
    # beta * h = 1: -log sigmoid(1) = log(1 + e^-1)
    assert losses.item() == pytest.approx(math.log1p(math.exp(-1.0)), abs=1e-12)  # 0.3132617
    assert chosen.item() == pytest.approx(0.5) and rejected.item() == pytest.approx(-0.5)
    assert losses.shape == chosen.shape == rejected.shape == (1,)


def test_policy_equal_to_reference_costs_log_two():
    x = torch.tensor([-4.0, -7.5, -0.25])
    losses, chosen, rejected = dpo_loss(x, x - 1, x, x - 1, beta=0.1)
    assert torch.allclose(losses, torch.full((3,), math.log(2.0)))
    assert torch.equal(chosen, torch.zeros(3)) and torch.equal(rejected, torch.zeros(3))


def test_label_smoothing_is_conservative_dpo_by_hand():
    _, pc, pr, rc, rr = _pair()
    losses, _, _ = dpo_loss(pc, pr, rc, rr, beta=0.5, label_smoothing=0.2)
    # 0.8 * -log sigmoid(1) + 0.2 * -log sigmoid(-1) = 0.8 * 0.3132617 + 0.2 * 1.3132617
    expected = 0.8 * math.log1p(math.exp(-1.0)) + 0.2 * math.log1p(math.exp(1.0))
    assert losses.item() == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.5132617, abs=1e-6)


def test_ipo_by_hand_and_its_finite_target():
    _, pc, pr, rc, rr = _pair()
    losses, chosen, rejected = dpo_loss(pc, pr, rc, rr, beta=0.5, loss_type="ipo")
    assert losses.item() == pytest.approx((2.0 - 1.0) ** 2)  # (h - 1/(2 beta))^2 with h = 2, beta = 0.5
    assert chosen.item() == pytest.approx(0.5) and rejected.item() == pytest.approx(-0.5)
    # h exactly at 1/(2 beta) = 5 (beta 0.1): zero loss, where DPO would still push.
    at_target, _, _ = dpo_loss(torch.tensor([3.0]), torch.tensor([-2.0]), torch.zeros(1), torch.zeros(1),
                               beta=0.1, loss_type="ipo")
    assert at_target.item() == pytest.approx(0.0, abs=1e-12)


def test_gradients_by_hand():
    policy, pc, pr, rc, rr = _pair(grad=True)
    dpo_loss(pc, pr, rc, rr, beta=0.5)[0].sum().backward()
    # d/dpc -log sigmoid(beta h) = -beta * sigmoid(-beta h); d/dpr is its negative
    g = 0.5 / (1.0 + math.exp(1.0))
    assert policy.grad.tolist() == pytest.approx([-g, g], abs=1e-12)

    policy, pc, pr, rc, rr = _pair(grad=True)
    dpo_loss(pc, pr, rc, rr, beta=0.5, loss_type="ipo")[0].sum().backward()
    assert policy.grad.tolist() == pytest.approx([2.0, -2.0])  # 2 (h - 1) with h = 2
    assert not dpo_loss(pc, pr, rc, rr, beta=0.5)[1].requires_grad  # rewards are for metrics only


def test_beta_sharpens_the_sigmoid_loss():
    _, pc, pr, rc, rr = _pair()
    assert dpo_loss(pc, pr, rc, rr, beta=1.0)[0] < dpo_loss(pc, pr, rc, rr, beta=0.1)[0]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"beta": 0.0}, "beta"), ({"beta": -1.0}, "beta"), ({"loss_type": "hinge"}, "loss_type"),
    ({"label_smoothing": 0.5}, "label_smoothing"), ({"label_smoothing": -0.1}, "label_smoothing"),
    ({"loss_type": "ipo", "label_smoothing": 0.1}, "sigmoid only"),
])
def test_bad_knobs_are_refused(kwargs, match):
    x = torch.zeros(2)
    with pytest.raises(ValueError, match=match):
        dpo_loss(x, x, x, x, **{"beta": 0.1, **kwargs})
