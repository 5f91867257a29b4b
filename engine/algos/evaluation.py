"""Evaluation estimators as pure functions: pass@k and a pairwise win rate with its standard error.

Plain Python numbers in, plain floats out; no I/O, no config objects.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

TIE_TOLERANCE = 1e-6
"""Scores this close count as a tie: the same response scored in two differently padded batches can
differ by float noise."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem (Chen et al. 2021, arXiv:2107.03374): the chance that at least
    one of `k` samples drawn without replacement from `n` generated ones, `c` of them correct,
    passes: `1 - C(n - c, k) / C(n, k)`."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k holds a correct sample
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_levels(n: int) -> list[int]:
    """The k reported for `n` samples per problem: powers of two up to `n` (1, 2, 4, ...)."""
    levels, k = [], 1
    while k <= n:
        levels.append(k)
        k *= 2
    return levels


def mean_pass_at_k(correct: Sequence[int], n: int, k: int) -> float:
    """pass@k averaged over problems; `correct[i]` is problem i's number of passing samples of `n`."""
    if not correct:
        raise ValueError("no problems")
    return sum(pass_at_k(n, c, k) for c in correct) / len(correct)


def pairwise_outcome(score: float, other: float, tolerance: float = TIE_TOLERANCE) -> float:
    """1.0 when `score` beats `other`, 0.0 when it loses, 0.5 for a tie (within `tolerance`)."""
    if score > other + tolerance:
        return 1.0
    if score < other - tolerance:
        return 0.0
    return 0.5


def win_rate(outcomes: Sequence[float], groups: Sequence[int]) -> tuple[float, float]:
    """(win rate, its standard error) of pairwise `outcomes` (1 win, 0.5 tie, 0 loss).

    The rate is the mean over all pairs. Pairs of the same prompt (`groups[i]`, its index) are not
    independent, so the standard error is clustered by prompt: the sample standard deviation of the
    per-prompt mean outcomes over the square root of the number of prompts (with one pair per prompt
    this is the usual `s / sqrt(N)`). NaN with a single prompt.
    """
    if not outcomes or len(outcomes) != len(groups):
        raise ValueError(f"{len(outcomes)} outcomes for {len(groups)} groups")
    rate = sum(outcomes) / len(outcomes)
    sums: dict[int, list[float]] = {}
    for outcome, group in zip(outcomes, groups):
        sums.setdefault(group, []).append(outcome)
    means = [sum(v) / len(v) for v in sums.values()]
    p = len(means)
    if p < 2:
        return rate, math.nan
    centre = sum(means) / p
    variance = sum((m - centre) ** 2 for m in means) / (p - 1)
    return rate, math.sqrt(variance / p)
