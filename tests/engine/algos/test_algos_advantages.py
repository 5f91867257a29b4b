"""GAE and GRPO advantages: hand-computed cases and invariants."""

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine.algos import compute_gae, compute_grpo_advantages, masked_mean, masked_var, masked_whiten

SETTINGS = settings(max_examples=40, deadline=None)
NAN = float("nan")


def _approx(t, expected):
    assert t.flatten().tolist() == pytest.approx(torch.tensor(expected).flatten().tolist(), rel=1e-5, abs=1e-6)


def test_gae_hand_computed_with_masking_inside_and_after_response():
    gamma, lam = 0.9, 0.8  # gamma * lam = 0.72
    rewards = torch.tensor([[0.0, 0.0, 1.0, NAN], [0.0, 5.0, 0.0, 1.0]])
    values = torch.tensor([[0.1, 0.2, 0.3, NAN], [0.5, 7.0, 0.4, 0.2]])
    # row 0: trailing padding; row 1: a masked span (e.g. tool output) inside the response
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 1, 1]])
    adv, ret = compute_gae(rewards, values, mask, gamma, lam)

    # row 0: A2 = 1 - .3 = .7; A1 = (.9*.3 - .2) + .72*.7 = .574; A0 = (.9*.2 - .1) + .72*.574
    raw0 = [0.49328, 0.574, 0.7]
    # row 1 skips t=1: A3 = .8; A2 = (.9*.2 - .4) + .72*.8 = .356; A0 = (.9*.4 - .5) + .72*.356
    raw1 = [0.11632, 0.356, 0.8]
    _approx(ret[0, :3], [a + v for a, v in zip(raw0, [0.1, 0.2, 0.3], strict=True)])
    _approx(ret[1, [0, 2, 3]], [a + v for a, v in zip(raw1, [0.5, 0.4, 0.2], strict=True)])
    # the masked token carries the next real token's advantage
    _approx(ret[1, 1] - values[1, 1], 0.356)

    real = torch.tensor(raw0 + raw1)
    mean, std = real.mean(), real.var().add(1e-8).sqrt()
    _approx(adv[mask.bool()], ((real - mean) / std).tolist())


def test_gae_gamma_lam_one_is_reward_to_go_minus_value():
    rewards = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 4.0]])
    values = torch.tensor([[0.5, 0.5, 0.5], [1.0, 2.0, 3.0]])
    mask = torch.ones(2, 3)
    adv, ret = compute_gae(rewards, values, mask, 1.0, 1.0)
    _approx(ret, [[6.0, 5.0, 3.0], [4.0, 4.0, 4.0]])
    raw = ret - values
    assert torch.allclose(adv, masked_whiten(raw, mask))


def test_gae_single_token_row_and_all_masked_row():
    rewards = torch.tensor([[3.0, 0.0], [0.0, 0.0], [1.0, 2.0]])
    values = torch.tensor([[1.0, 9.0], [4.0, 5.0], [0.0, 0.0]])
    mask = torch.tensor([[1, 0], [0, 0], [1, 1]])
    adv, ret = compute_gae(rewards, values, mask, 1.0, 0.95)
    assert ret[0, 0].item() == pytest.approx(3.0)  # A = r - V, bootstrap 0
    _approx(ret[1], [4.0, 5.0])  # all-masked row: raw advantage 0, returns = values
    _approx(ret[2], [0.0 + 1.0 + 0.95 * 2.0, 2.0])
    assert not adv[mask.bool()].isnan().any()


def test_gae_needs_two_real_tokens_in_batch():
    with pytest.raises(ValueError, match="at least 2"):
        compute_gae(torch.ones(2, 2), torch.zeros(2, 2), torch.tensor([[1, 0], [0, 0]]), 1.0, 1.0)


def test_gae_has_no_grad():
    values = torch.zeros(2, 2, requires_grad=True)
    adv, ret = compute_gae(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), values, torch.ones(2, 2), 1.0, 1.0)
    assert not adv.requires_grad and not ret.requires_grad


def _reference_gae(rewards, values, mask, gamma, lam):
    """Textbook GAE per row on the real tokens only; the masked ones are dropped."""
    raw = torch.zeros_like(values, dtype=torch.float64)
    for i in range(rewards.shape[0]):
        idx = mask[i].nonzero().flatten().tolist()
        last, next_v = 0.0, 0.0
        for t in reversed(idx):
            last = rewards[i, t].item() + gamma * next_v - values[i, t].item() + gamma * lam * last
            next_v = values[i, t].item()
            raw[i, t] = last
    return raw


@st.composite
def gae_batches(draw):
    batch = draw(st.integers(1, 4))
    length = draw(st.integers(1, 6))
    n = batch * length
    floats = st.floats(-5, 5, width=32)
    rewards = torch.tensor(draw(st.lists(floats, min_size=n, max_size=n))).reshape(batch, length)
    values = torch.tensor(draw(st.lists(floats, min_size=n, max_size=n))).reshape(batch, length)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n))).reshape(batch, length)
    assume(mask.sum() >= 2)
    gamma = draw(st.sampled_from([1.0, 0.99, 0.5]))
    lam = draw(st.sampled_from([1.0, 0.95, 0.0]))
    return rewards, values, mask, gamma, lam


@SETTINGS
@given(gae_batches())
def test_gae_matches_reference_on_real_tokens(data):
    rewards, values, mask, gamma, lam = data
    _, ret = compute_gae(rewards, values, mask, gamma, lam)
    expected = _reference_gae(rewards, values, mask, gamma, lam)
    assert torch.allclose((ret - values)[mask].double(), expected[mask], atol=1e-4)


@SETTINGS
@given(gae_batches(), st.integers(0, 3), st.sampled_from([0.0, 1e6, NAN]))
def test_gae_padding_never_changes_results(data, extra, fill):
    rewards, values, mask, gamma, lam = data
    adv, ret = compute_gae(rewards, values, mask, gamma, lam)
    b, length = mask.shape
    pad = torch.full((b, extra), fill)
    p_rewards = torch.cat([torch.where(mask, rewards, fill), pad], dim=1)
    p_values = torch.cat([torch.where(mask, values, fill), pad], dim=1)
    p_mask = torch.cat([mask, torch.zeros(b, extra, dtype=torch.bool)], dim=1)
    p_adv, p_ret = compute_gae(p_rewards, p_values, p_mask, gamma, lam)
    assert torch.allclose(p_adv[:, :length][mask], adv[mask], atol=1e-5)
    assert torch.allclose(p_ret[:, :length][mask], ret[mask], atol=1e-5)


@SETTINGS
@given(gae_batches())
def test_gae_advantages_are_whitened(data):
    rewards, values, mask, gamma, lam = data
    adv, ret = compute_gae(rewards, values, mask, gamma, lam)
    assume(masked_var(ret - values, mask).item() > 1e-2)
    assert masked_mean(adv, mask).item() == pytest.approx(0.0, abs=1e-4)
    assert masked_var(adv, mask).item() == pytest.approx(1.0, rel=1e-3)


# GRPO ---------------------------------------------------------------------------------------------

# Scores (sum over real tokens): group a = [1, 0], b = [2] (singleton), c = [0.1, 0.1, 0.1] (constant).
GRPO_REWARDS = torch.tensor(
    [
        [0.0, 1.0, 100.0],  # padding reward 100 is ignored
        [0.0, 0.0, 0.0],
        [0.0, 2.0, 0.0],
        [0.1, 0.0, 0.0],
        [0.0, 0.0, 0.1],
        [0.05, 0.05, 0.0],
    ]
)
GRPO_MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1]])
GROUPS = ["a", "a", "b", "c", "c", "c"]


def test_grpo_hand_computed():
    adv, ret = compute_grpo_advantages(GRPO_REWARDS, GRPO_MASK, GROUPS)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # mean .5, unbiased std sqrt(.5)
    per_row = [a, -a, 2.0 / (1 + 1e-6), 0.0, 0.0, 0.0]
    expected = torch.tensor(per_row).unsqueeze(-1) * GRPO_MASK
    assert torch.allclose(adv, expected)
    assert torch.equal(adv, ret)
    assert (adv[GRPO_MASK == 0] == 0).all()
    assert (adv[3:] == 0).all()  # a constant group is exactly 0, not rounding error / eps


def test_grpo_without_std_normalisation():
    adv, _ = compute_grpo_advantages(GRPO_REWARDS, GRPO_MASK, GROUPS, norm_by_std=False)
    expected = torch.tensor([0.5, -0.5, 2.0, 0.0, 0.0, 0.0]).unsqueeze(-1) * GRPO_MASK
    assert torch.allclose(adv, expected)


def test_grpo_group_index_as_tensor():
    by_str, _ = compute_grpo_advantages(GRPO_REWARDS, GRPO_MASK, GROUPS)
    by_int, _ = compute_grpo_advantages(GRPO_REWARDS, GRPO_MASK, torch.tensor([7, 7, 3, 9, 9, 9]))
    assert torch.equal(by_str, by_int)


def test_grpo_rejects_wrong_index_length():
    with pytest.raises(ValueError, match="group_index"):
        compute_grpo_advantages(GRPO_REWARDS, GRPO_MASK, ["a"] * 5)


@st.composite
def grpo_batches(draw):
    groups = draw(st.lists(st.integers(0, 3), min_size=1, max_size=8))
    batch, length = len(groups), draw(st.integers(1, 4))
    n = batch * length
    rewards = draw(st.lists(st.floats(-3, 3, width=32), min_size=n, max_size=n))
    mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return torch.tensor(rewards).reshape(batch, length), torch.tensor(mask).reshape(batch, length), groups


@SETTINGS
@given(grpo_batches(), st.integers(1, 3))
def test_grpo_padding_never_changes_results(data, extra):
    rewards, mask, groups = data
    adv, _ = compute_grpo_advantages(rewards, mask, groups)
    b, length = mask.shape
    p_rewards = torch.cat([torch.where(mask, rewards, 9.0), torch.full((b, extra), 9.0)], dim=1)
    p_mask = torch.cat([mask, torch.zeros(b, extra, dtype=torch.bool)], dim=1)
    p_adv, _ = compute_grpo_advantages(p_rewards, p_mask, groups)
    assert torch.allclose(p_adv[:, :length], adv, atol=1e-5)
    assert (p_adv[:, length:] == 0).all()


@SETTINGS
@given(grpo_batches())
def test_grpo_groups_are_centred_and_scaled(data):
    rewards, _, groups = data
    adv, _ = compute_grpo_advantages(rewards, torch.ones_like(rewards), groups)
    row_adv = adv[:, 0].double()
    scores = rewards.sum(-1).double()
    for g in set(groups):
        rows = torch.tensor([i for i, x in enumerate(groups) if x == g])
        if len(rows) == 1:
            assert row_adv[rows].item() == pytest.approx(scores[rows].item() / (1 + 1e-6), abs=1e-5)
            continue
        assert row_adv[rows].sum().item() == pytest.approx(0.0, abs=1e-4)
        std = scores[rows].std().item()
        if std > 1e-2:
            assert row_adv[rows].std().item() == pytest.approx(std / (std + 1e-6), rel=1e-4)


@SETTINGS
@given(grpo_batches(), st.randoms(use_true_random=False))
def test_grpo_is_permutation_equivariant(data, rng):
    rewards, mask, groups = data
    perm = list(range(len(groups)))
    rng.shuffle(perm)
    adv, _ = compute_grpo_advantages(rewards, mask, groups)
    p_adv, _ = compute_grpo_advantages(rewards[perm], mask[perm], [groups[i] for i in perm])
    assert torch.allclose(p_adv, adv[perm], atol=1e-5)
