"""Policy loss (clip + dual clip), value loss and loss aggregation."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.algos import (
    LOSS_AGG_MODES,
    agg_loss,
    cross_entropy_loss,
    importance_sampling_loss,
    policy_loss,
    value_loss,
)

SETTINGS = settings(max_examples=40, deadline=None)

# Ratios and advantages chosen to hit every branch (eps = 0.2, c = 3):
#   a: A=+1 r=1.5 -> clipped, -1.2         d: A=-1 r=5 -> dual clip bounds at 3
#   b: A=+1 r=0.5 -> unclipped, -0.5       e: A=+2 r=5 -> clipped, -2.4 (no dual clip for A > 0)
#   c: A=-1 r=0.5 -> clipped, 0.8          f: A=-1 r=1 -> unclipped, 1
# The last column is padding with absurd values.
RATIOS = [[1.5, 0.5, 0.5, 1e30], [5.0, 5.0, 1.0, 1e-30]]
ADV = torch.tensor([[1.0, 1.0, -1.0, 100.0], [-1.0, 2.0, -1.0, -100.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])
LOG_RATIO = torch.tensor(RATIOS).log()
REAL_LOG_RATIOS = [math.log(r) for r in (1.5, 0.5, 0.5, 5.0, 5.0, 1.0)]


def test_policy_loss_hand_computed():
    log_prob = LOG_RATIO.clone().requires_grad_()
    loss, metrics = policy_loss(torch.zeros(2, 4), log_prob, ADV, MASK)
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 3.0 - 2.4 + 1.0) / 6)
    assert metrics["pg_clipfrac"] == pytest.approx(3 / 6)  # a, c, e
    assert metrics["pg_clipfrac_lower"] == pytest.approx(1 / 6)  # d
    assert metrics["ppo_kl"] == pytest.approx(-sum(REAL_LOG_RATIOS) / 6)
    assert all(type(v) is float for v in metrics.values())

    loss.backward()
    # only unclipped tokens carry gradient: d(-A r)/d log r = -A r
    expected = torch.tensor([[0.0, -0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]) / 6
    assert torch.allclose(log_prob.grad, expected)


def test_policy_loss_seq_mean_token_sum():
    loss, _ = policy_loss(torch.zeros(2, 4), LOG_RATIO, ADV, MASK, loss_agg_mode="seq-mean-token-sum")
    assert loss.item() == pytest.approx(((-1.2 - 0.5 + 0.8) + (3.0 - 2.4 + 1.0)) / 2)


def test_policy_loss_asymmetric_clip():
    old = torch.zeros(1, 2)
    log_prob = torch.tensor([[1.5, 0.5]]).log()
    adv = torch.tensor([[1.0, -1.0]])
    loss, metrics = policy_loss(old, log_prob, adv, torch.ones(1, 2), clip_ratio_low=0.1, clip_ratio_high=0.28)
    assert loss.item() == pytest.approx((-1.28 + 0.9) / 2)
    assert metrics["pg_clipfrac"] == 1.0


def test_dual_clip_on_both_signs_of_advantage():
    old = torch.zeros(1, 2)
    log_prob = torch.full((1, 2), math.log(10.0))
    adv = torch.tensor([[-2.0, 2.0]])
    loss, metrics = policy_loss(old, log_prob, adv, torch.ones(1, 2), clip_ratio_c=3.0)
    # A=-2: min(max(20, 2.4), 6) = 6; A=+2: max(-20, -2.4) = -2.4, and the dual clip does not apply
    assert loss.item() == pytest.approx((6.0 - 2.4) / 2)
    assert metrics["pg_clipfrac_lower"] == pytest.approx(0.5)
    loss_c10, metrics_c10 = policy_loss(old, log_prob, adv, torch.ones(1, 2), clip_ratio_c=10.0)
    assert loss_c10.item() == pytest.approx((20.0 - 2.4) / 2)  # 20 < 2 * 10: not bound
    assert metrics_c10["pg_clipfrac_lower"] == 0.0


def test_log_ratio_is_clamped():
    old = torch.zeros(1, 2)
    log_prob = torch.tensor([[50.0, -50.0]], requires_grad=True)
    adv = torch.tensor([[-1.0, 1.0]])
    loss, metrics = policy_loss(old, log_prob, adv, torch.ones(1, 2))
    assert math.isfinite(loss.item())
    # A=-1, r=e^20: the dual clip bounds at 3; A=+1, r=e^-20: max(-e^-20, -0.8) ~ 0
    assert loss.item() == pytest.approx(3.0 / 2)
    assert metrics["ppo_kl"] == pytest.approx(0.0)  # (-20 + 20) / 2
    loss.backward()
    assert torch.isfinite(log_prob.grad).all()


@pytest.mark.parametrize("c", [1.0, 0.5])
def test_clip_ratio_c_must_exceed_one(c):
    with pytest.raises(ValueError, match="clip_ratio_c"):
        policy_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), clip_ratio_c=c)


def test_policy_loss_at_ratio_one_is_minus_mean_advantage():
    adv = torch.tensor([[1.0, -3.0, 7.0]])
    loss, metrics = policy_loss(torch.zeros(1, 3), torch.zeros(1, 3), adv, torch.tensor([[1, 1, 0]]))
    assert loss.item() == pytest.approx(1.0)
    assert metrics == {"pg_clipfrac": 0.0, "ppo_kl": 0.0, "pg_clipfrac_lower": 0.0}


def test_value_loss_hand_computed():
    # (vpred, old value, return); cliprange 0.2 keeps vpred within [-0.2, 0.2] of the old value 0
    vpreds = torch.tensor([[1.0, 0.3, -0.1, 0.5, 0.5, 100.0]], requires_grad=True)
    values = torch.zeros(1, 6)
    returns = torch.tensor([[1.0, 1.0, 1.0, 0.6, -1.0, -100.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    loss, metrics = value_loss(vpreds, values, returns, mask, cliprange_value=0.2)
    # max(unclipped, clipped) errors: .64 (c), .64 (c), 1.21, .16 (c), 2.25
    assert loss.item() == pytest.approx(0.5 * (0.64 + 0.64 + 1.21 + 0.16 + 2.25) / 5)
    assert metrics == {"vf_clipfrac": pytest.approx(3 / 5)}
    loss.backward()
    # clipped tokens get no gradient; the rest get (vpred - return) / 5
    expected = torch.tensor([[0.0, 0.0, -1.1 / 5, 0.0, 1.5 / 5, 0.0]])
    assert torch.allclose(vpreds.grad, expected)


def test_value_loss_agg_mode():
    vpreds = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    loss, _ = value_loss(vpreds, vpreds, torch.zeros(2, 2), torch.tensor([[1, 1], [1, 0]]), 0.5,
                         loss_agg_mode="seq-mean-token-sum")
    assert loss.item() == pytest.approx(0.5 * ((1 + 4) + 9) / 2)


LOSS_MAT = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 9.0, 9.0, 9.0]])
AGG_MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 29 / 6),
        ("seq-mean-token-sum", (3 + 26 + 0) / 3),
        ("seq-mean-token-mean", (1.5 + 6.5) / 2),  # the all-padding row is left out, not 0/0
        ("seq-mean-token-sum-norm", (3 + 26 + 0) / 3 / 4),  # a mean over rows, as Dr. GRPO and VERL
    ],
)
def test_agg_loss_hand_computed(mode, expected):
    assert agg_loss(LOSS_MAT, AGG_MASK, mode).item() == pytest.approx(expected)


def test_agg_loss_sum_norm_with_constant_scale():
    assert agg_loss(LOSS_MAT, AGG_MASK, "seq-mean-token-sum-norm", loss_scale_factor=8).item() == pytest.approx(29 / 3 / 8)


def test_agg_loss_unknown_mode_names_valid_ones():
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        agg_loss(LOSS_MAT, AGG_MASK, "mean")


@st.composite
def loss_batches(draw):
    batch, length = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    n = batch * length
    x = draw(st.lists(st.floats(-10, 10, width=32), min_size=n, max_size=n))
    mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return torch.tensor(x).reshape(batch, length), torch.tensor(mask).reshape(batch, length)


def _pad(x, mask, extra, fill):
    b = x.shape[0]
    x = torch.cat([torch.where(mask, x, fill), torch.full((b, extra), fill)], dim=1)
    return x, torch.cat([mask, torch.zeros(b, extra, dtype=torch.bool)], dim=1)


@SETTINGS
@given(loss_batches(), st.integers(0, 3), st.sampled_from(LOSS_AGG_MODES))
def test_agg_loss_padding_never_changes_result(data, extra, mode):
    x, mask = data
    px, pmask = _pad(x, mask, extra, 1e4)
    scale = 16  # a fixed Dr. GRPO divisor makes the sum-norm mode padding-free too
    assert agg_loss(px, pmask, mode, scale).item() == pytest.approx(agg_loss(x, mask, mode, scale).item(),
                                                                    rel=1e-5, abs=1e-5)


@SETTINGS
@given(loss_batches(), loss_batches(), st.integers(0, 2))
def test_policy_and_value_loss_padding_never_changes_result(a, b, extra):
    (x, mask), (y, _) = a, b
    y = y[: x.shape[0], : x.shape[1]]
    y = torch.nn.functional.pad(y, (0, x.shape[1] - y.shape[1], 0, x.shape[0] - y.shape[0]))
    old, new = x / 4, y / 4  # log-probs
    loss, metrics = policy_loss(old, new, x, mask)
    p_old, p_mask = _pad(old, mask, extra, 30.0)
    p_new, _ = _pad(new, mask, extra, -30.0)
    p_adv, _ = _pad(x, mask, extra, -1e3)
    p_loss, p_metrics = policy_loss(p_old, p_new, p_adv, p_mask)
    assert p_loss.item() == pytest.approx(loss.item(), rel=1e-5, abs=1e-5)
    assert p_metrics == pytest.approx(metrics, rel=1e-5, abs=1e-5)

    v_loss, v_metrics = value_loss(new, old, x, mask, 0.5)
    pv_loss, pv_metrics = value_loss(p_new, p_old, p_adv, p_mask, 0.5)
    assert pv_loss.item() == pytest.approx(v_loss.item(), rel=1e-5, abs=1e-5)
    assert pv_metrics == pytest.approx(v_metrics)


@SETTINGS
@given(loss_batches(), st.floats(1.01, 10))
def test_policy_loss_is_bounded_by_dual_clip(data, c):
    x, mask = data
    adv = x
    log_prob = torch.flip(x, dims=[1])
    loss, _ = policy_loss(torch.zeros_like(x), log_prob, adv, torch.ones_like(mask), clip_ratio_c=c)
    # every token's loss is at most c * |A| where A < 0, and at most 0 where A >= 0
    bound = torch.where(adv < 0, -adv * c, 0.0)
    assert loss.item() <= bound.mean().item() + 1e-4


# --- token-sum losses of interactive trainers -------------------------------------------------------

def test_cross_entropy_loss_is_the_weighted_sum_and_ignores_zero_weight_garbage():
    log_prob = torch.tensor([[-1.0, -2.0, float("nan")], [-0.5, -4.0, -1e30]], requires_grad=True)
    weights = torch.tensor([[0.5, 1.0, 0.0], [2.0, 0.0, 0.0]])
    loss = cross_entropy_loss(log_prob, weights)
    assert loss.item() == pytest.approx(0.5 * 1.0 + 1.0 * 2.0 + 2.0 * 0.5)
    loss.backward()
    assert torch.equal(log_prob.grad, -weights)


def test_importance_sampling_loss_hand_computed():
    sampler = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.2, 0.1, 0.3]]))
    current = torch.log(torch.tensor([[0.25, 0.5, 0.1], [0.4, 0.1, 0.3]])).requires_grad_()
    adv = torch.tensor([[1.0, -2.0, 7.0], [0.5, 3.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    loss, metrics = importance_sampling_loss(current, sampler, adv, mask)
    ratios = [0.5, 2.0, 2.0, 1.0]
    assert loss.item() == pytest.approx(-(0.5 * 1.0 + 2.0 * -2.0 + 2.0 * 0.5 + 1.0 * 3.0))
    assert metrics["ratio_mean"] == pytest.approx(sum(ratios) / 4)
    assert metrics["sampler_kl"] == pytest.approx(-sum(math.log(r) for r in ratios) / 4)
    loss.backward()
    # d(-A r)/d log p = -A r on counted tokens, 0 elsewhere (no clipping)
    expected = torch.tensor([[-0.5, 4.0, 0.0], [-1.0, -3.0, 0.0]])
    assert torch.allclose(current.grad, expected)


def test_policy_loss_with_scale_one_is_a_mean_of_token_sums():
    log_prob = LOG_RATIO.clone()
    loss, _ = policy_loss(torch.zeros(2, 4), log_prob, ADV, MASK, loss_agg_mode="seq-mean-token-sum-norm",
                          loss_scale_factor=1.0)
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 3.0 - 2.4 + 1.0) / 2)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_duplicating_every_sequence_leaves_the_gradient_alone(mode):
    """Dr. GRPO's loss is per sequence (`1/G`): twice the same rows give the same gradient, in every
    mode (a sum over sequences in seq-mean-token-sum-norm doubled it)."""
    grads = []
    for copies in (1, 2):
        log_prob = LOG_RATIO.clone().requires_grad_(True)
        rows = log_prob.repeat(copies, 1)
        loss, _ = policy_loss(torch.zeros_like(rows), rows, ADV.repeat(copies, 1), MASK.repeat(copies, 1),
                              loss_agg_mode=mode)
        loss.backward()
        grads.append(log_prob.grad)
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-6, atol=0.0)


# --- Tinker's policy-gradient losses, by hand ---------------------------------------------------------------

def _one_token(ratio: float):
    """A single token whose trained log-prob (a leaf with grad) is log(ratio) above the sampler's 0."""
    log_prob = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    return log_prob, torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.bool)


@pytest.mark.parametrize(("ratio", "advantage", "thresholds", "loss", "grad"), [
    # -min(r A, clamp(r, lo, hi) A); d/dlogp of r A is r A.
    (5.0, -1.0, (0.8, 1.2), 5.0, 5.0),   # no dual clip: VERL's gave loss 3.0 and gradient 0
    (5.0, 1.0, (0.8, 1.2), -1.2, 0.0),   # clipped: no gradient
    (0.5, -1.0, (0.8, 1.2), 0.8, 0.0),
    (0.5, 1.0, (0.8, 1.2), -0.5, -0.5),
    (1.1, 2.0, (0.8, 1.2), -2.2, -2.2),  # inside the thresholds
    (1.5, 1.0, (0.5, 2.0), -1.5, -1.5),  # absolute thresholds, not 1 -/+ eps
])
def test_tinker_ppo_by_hand(ratio, advantage, thresholds, loss, grad):
    from engine.algos import ppo_threshold_loss

    log_prob, sampler, mask = _one_token(ratio)
    value, metrics = ppo_threshold_loss(log_prob, sampler, torch.full((1, 1), advantage, dtype=torch.float64),
                                        mask, *thresholds)
    value.backward()
    assert float(value.detach()) == pytest.approx(loss)
    assert float(log_prob.grad) == pytest.approx(grad)
    assert metrics["ratio_mean"] == pytest.approx(ratio)


def test_tinker_cispo_and_dro_by_hand():
    from engine.algos import cispo_loss, dro_loss

    # cispo: -sg(clamp(r, lo, hi)) logp A; r = 5 clipped to 4 (default upper threshold), logp = log 5.
    log_prob, sampler, mask = _one_token(5.0)
    advantage = torch.full((1, 1), -1.0, dtype=torch.float64)
    value, _ = cispo_loss(log_prob, sampler, advantage, mask)
    value.backward()
    assert float(value.detach()) == pytest.approx(4.0 * math.log(5.0))
    assert float(log_prob.grad) == pytest.approx(4.0)  # the coefficient, detached
    log_prob, sampler, mask = _one_token(0.5)
    cispo_loss(log_prob, sampler, torch.ones(1, 1, dtype=torch.float64), mask, 0.8, 1.2)[0].backward()
    assert float(log_prob.grad) == pytest.approx(-0.8)  # lower threshold: still a gradient
    # dro: -(logp A - beta/2 (logp - q)^2); d/dlogp = -A + beta (logp - q).
    log_prob, sampler, mask = _one_token(math.e)  # logp - q = 1
    value, _ = dro_loss(log_prob, sampler, torch.full((1, 1), 2.0, dtype=torch.float64), mask, beta=0.5)
    value.backward()
    assert float(value.detach()) == pytest.approx(-(1.0 * 2.0 - 0.25))
    assert float(log_prob.grad) == pytest.approx(-2.0 + 0.5)
