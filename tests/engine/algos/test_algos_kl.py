"""KL estimators, KL-in-reward, and the KL coefficient controllers."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.algos import AdaptiveKLController, FixedKLController, apply_kl_in_reward, kl_penalty

SETTINGS = settings(max_examples=40, deadline=None)

LOG_PROB = torch.tensor([[0.0, -1.0, -2.0]])
REF_LOG_PROB = torch.tensor([[-1.0, -1.0, 0.0]])  # d = log_prob - ref = [1, 0, -2]


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        (("kl", "k1"), [1.0, 0.0, -2.0]),
        (("abs",), [1.0, 0.0, 2.0]),
        (("mse", "k2"), [0.5, 0.0, 2.0]),
        (("low_var_kl", "k3"), [math.exp(-1) + 1 - 1, 0.0, math.exp(2) - 2 - 1]),  # e^-d + d - 1
    ],
)
def test_kl_penalty_hand_computed(kinds, expected):
    for kind in kinds:
        assert kl_penalty(LOG_PROB, REF_LOG_PROB, kind)[0].tolist() == pytest.approx(expected, rel=1e-6)


def test_low_var_kl_is_clamped():
    out = kl_penalty(torch.tensor([[-50.0, 50.0]]), torch.zeros(1, 2), "low_var_kl")
    assert out.tolist() == [[10.0, 10.0]]


def test_kl_penalty_unknown_kind_names_valid_ones():
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(LOG_PROB, REF_LOG_PROB, "full")


@SETTINGS
@given(st.lists(st.tuples(st.floats(-30, 0), st.floats(-30, 0)), min_size=1, max_size=8))
def test_kl_estimators_invariants(pairs):
    lp = torch.tensor([[p for p, _ in pairs]], dtype=torch.float64)
    ref = torch.tensor([[r for _, r in pairs]], dtype=torch.float64)
    for kind in ("abs", "mse", "low_var_kl"):
        assert (kl_penalty(lp, ref, kind) >= 0).all()
        assert (kl_penalty(lp, lp, kind) == 0).all()
    assert (kl_penalty(lp, ref, "low_var_kl") <= 10).all()
    assert torch.equal(kl_penalty(lp, ref, "kl"), lp - ref)


def test_apply_kl_in_reward_hand_computed():
    scores = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    kl = torch.tensor([[0.1, 0.2, 0.3, float("nan")]])  # padding KL may be garbage
    rewards = apply_kl_in_reward(scores, kl, 0.5, torch.tensor([[1, 1, 1, 0]]))
    assert rewards[0].tolist() == pytest.approx([-0.05, -0.1, 0.85, 0.0])


def test_fixed_controller_never_moves():
    ctl = FixedKLController(0.05)
    for kl in (0.0, 1.0, 100.0):
        ctl.update(kl, 256)
    assert ctl.value == 0.05
    restored = FixedKLController(1.0)
    restored.load_state_dict(ctl.state_dict())
    assert restored.value == 0.05


def test_adaptive_controller_single_updates():
    ctl = AdaptiveKLController(init_kl_coef=0.2, target_kl=6.0, horizon=10000)
    ctl.update(3.0, 256)  # error -0.5, clipped to -0.2
    assert ctl.value == pytest.approx(0.2 * (1 - 0.2 * 256 / 10000))
    ctl = AdaptiveKLController(0.2, 6.0, 10000)
    ctl.update(6.6, 256)  # error +0.1, inside the clip
    assert ctl.value == pytest.approx(0.2 * (1 + 0.1 * 256 / 10000))
    ctl = AdaptiveKLController(0.2, 6.0, 10000)
    ctl.update(torch.tensor(6.0), 256)  # on target: unchanged; tensors are accepted
    assert ctl.value == pytest.approx(0.2)


def test_adaptive_controller_trajectory():
    ctl = AdaptiveKLController(0.1, target_kl=0.1, horizon=1000)
    for _ in range(50):
        ctl.update(1.0, 100)  # far above target: +0.2 * 0.1 each step
    for _ in range(20):
        ctl.update(0.0, 100)  # far below target: -0.2 * 0.1 each step
    assert ctl.value == pytest.approx(0.1 * 1.02**50 * 0.98**20, rel=1e-9)


def test_adaptive_controller_converges_to_target():
    # a toy environment where the observed KL falls as beta rises: KL = 0.02 / beta, so beta* = 0.2
    ctl = AdaptiveKLController(0.05, target_kl=0.1, horizon=10)
    trajectory = []
    for _ in range(300):
        ctl.update(0.02 / ctl.value, 1)
        trajectory.append(ctl.value)
    assert trajectory[10] > trajectory[0]  # it climbs while KL is too high
    assert ctl.value == pytest.approx(0.2, rel=1e-3)


def test_adaptive_controller_resumes_with_same_coefficient():
    kls = [0.5, 0.01, 0.3, 0.08, 0.2, 0.0, 0.15, 0.12, 1.0, 0.05] * 2
    straight = AdaptiveKLController(0.1, 0.1, 500)
    for kl in kls:
        straight.update(kl, 64)

    first = AdaptiveKLController(0.1, 0.1, 500)
    for kl in kls[:10]:
        first.update(kl, 64)
    state = first.state_dict()
    resumed = AdaptiveKLController(0.1, 0.1, 500)  # a fresh process builds it from the config
    resumed.load_state_dict(state)
    for kl in kls[10:]:
        resumed.update(kl, 64)
    assert resumed.value == straight.value
    assert resumed.value != 0.1


@pytest.mark.parametrize(("target", "horizon"), [(0.0, 10), (0.1, 0)])
def test_adaptive_controller_rejects_bad_config(target, horizon):
    with pytest.raises(ValueError):
        AdaptiveKLController(0.1, target, horizon)
