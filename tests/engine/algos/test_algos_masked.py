"""Masked statistics: hand-computed cases and invariants under padding."""

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine.algos import explained_variance, last_index, masked_mean, masked_sum, masked_var, masked_whiten

SETTINGS = settings(max_examples=40, deadline=None)
NAN = float("nan")

# Real entries 1, 2, 4; padding holds NaN and inf, which must never leak.
X = torch.tensor([[1.0, 2.0, NAN], [4.0, float("inf"), 6.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


def test_masked_sum_and_mean_whole_batch():
    assert masked_sum(X, MASK).item() == 7.0
    assert masked_mean(X, MASK).item() == pytest.approx(7 / 3)


def test_masked_mean_per_row_and_all_masked_row():
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    assert masked_mean(x, mask, dim=-1).tolist() == pytest.approx([1.5, 4.0, 0.0])
    assert masked_sum(x, mask, dim=0).tolist() == [5.0, 2.0, 0.0]


def test_masked_mean_accepts_bool_and_float_masks():
    assert masked_mean(X, MASK.bool()).item() == pytest.approx(7 / 3)
    assert masked_mean(X, MASK.float()).item() == pytest.approx(7 / 3)


def test_masked_var_hand_computed():
    # deviations from 7/3: -4/3, -1/3, 5/3 -> squares sum to 42/9
    assert masked_var(X, MASK, unbiased=False).item() == pytest.approx(14 / 9)
    assert masked_var(X, MASK).item() == pytest.approx(7 / 3)


@pytest.mark.parametrize("mask", [[[0, 0, 0], [0, 0, 0]], [[0, 1, 0], [0, 0, 0]]])
def test_masked_var_unbiased_needs_two_entries(mask):
    with pytest.raises(ValueError, match="at least 2"):
        masked_var(X, torch.tensor(mask))


def test_masked_var_biased_single_entry_is_zero():
    assert masked_var(X, torch.tensor([[0, 1, 0], [0, 0, 0]]), unbiased=False).item() == 0.0


def test_masked_whiten_hand_computed():
    out = masked_whiten(X, MASK)
    std = math.sqrt(7 / 3 + 1e-8)
    expected = [(1 - 7 / 3) / std, (2 - 7 / 3) / std, (4 - 7 / 3) / std]
    assert out[MASK.bool()].tolist() == pytest.approx(expected, rel=1e-5)
    unshifted = masked_whiten(X, MASK, shift_mean=False)
    assert unshifted[MASK.bool()].tolist() == pytest.approx([v + 7 / 3 for v in expected], rel=1e-5)


def test_explained_variance_hand_computed():
    returns = torch.tensor([[1.0, 2.0, 3.0, 50.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    # residual [0, 0, 1]: unbiased variance 1/3; Var(returns) = 1
    values = torch.tensor([[1.0, 2.0, 2.0, 0.0]])
    assert explained_variance(values, returns, mask) == pytest.approx(1 - (1 / 3) / (1 + 1e-5))
    assert explained_variance(torch.zeros(1, 4), returns, mask) == pytest.approx(1e-5, abs=1e-6)
    assert math.isnan(explained_variance(values, returns, torch.tensor([[1, 0, 0, 0]])))


@st.composite
def masked_batches(draw, min_real=0):
    batch = draw(st.integers(1, 4))
    length = draw(st.integers(1, 6))
    n = batch * length
    values = draw(st.lists(st.floats(-100, 100, width=32), min_size=n, max_size=n))
    bits = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    assume(sum(bits) >= min_real)
    return torch.tensor(values).reshape(batch, length), torch.tensor(bits).reshape(batch, length)


def _pad(x, mask, extra, fill):
    """Append `extra` padding columns holding `fill`, and scribble `fill` over masked-out entries."""
    x = torch.where(mask, x, fill)
    x = torch.cat([x, torch.full((x.shape[0], extra), fill)], dim=1)
    return x, torch.cat([mask, torch.zeros(mask.shape[0], extra, dtype=torch.bool)], dim=1)


@SETTINGS
@given(masked_batches(min_real=2), st.integers(0, 3), st.sampled_from([0.0, 1e6, NAN, float("-inf")]))
def test_padding_never_changes_statistics(data, extra, fill):
    x, mask = data
    px, pmask = _pad(x, mask, extra, fill)
    assert torch.allclose(masked_mean(px, pmask), masked_mean(x, mask))
    assert torch.allclose(masked_mean(px, pmask, dim=-1), masked_mean(x, mask, dim=-1))
    assert torch.allclose(masked_var(px, pmask), masked_var(x, mask))
    length = x.shape[1]
    # Whitened values are unit-scale: an absolute tolerance for float32 reduction order (padding changes
    # it), which a value near 0 would otherwise fail on by 1e-7.
    assert torch.allclose(masked_whiten(px, pmask)[:, :length][mask], masked_whiten(x, mask)[mask], atol=1e-6)


@SETTINGS
@given(masked_batches(min_real=2))
def test_matches_statistics_of_selected_entries(data):
    x, mask = data
    selected = x[mask].double()
    assert masked_mean(x, mask).item() == pytest.approx(selected.mean().item(), rel=1e-4, abs=1e-4)
    assert masked_var(x, mask).item() == pytest.approx(selected.var().item(), rel=1e-4, abs=1e-3)


@SETTINGS
@given(masked_batches(min_real=2))
def test_whitened_has_mean_zero_and_variance_one(data):
    x, mask = data
    assume(masked_var(x, mask).item() > 1e-2)
    out = masked_whiten(x, mask)
    assert masked_mean(out, mask).item() == pytest.approx(0.0, abs=1e-4)
    assert masked_var(out, mask).item() == pytest.approx(1.0, rel=1e-3)


def test_last_index_is_the_last_one_even_past_holes():
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 1, 1]])
    assert last_index(mask).tolist() == [1, 3, 0, 4, 4]
    assert last_index(mask.bool()).tolist() == [1, 3, 0, 4, 4]
