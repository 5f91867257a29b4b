"""The recipe's monitoring points as code: judge a step (KL, non-finite numbers), filter unreliable
rewards (PF-PPO), and compare validation with training reward (overfitting).

Pure functions and small containers; `engine.ppo` acts on what they decide (rollback, warnings,
`Diverged`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from engine.config import GuardrailConfig

OVERFIT_MARGIN = 0.05
"""The recipe's evaluation gate: validation reward > training reward - 0.05."""


@dataclass(frozen=True)
class Verdict:
    """What the guardrails say about a finished step."""

    action: Literal["ok", "warn", "rollback"]
    reason: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)


def judge_step(kl: float, nonfinite: Sequence[str], cfg: GuardrailConfig) -> Verdict:
    """Roll back on non-finite numbers or `kl > rollback_kl`; warn on `kl > warn_kl`.

    Args:
        kl: the step's KL between the updated policy and the reference (`guardrails/kl`).
        nonfinite: what was NaN/inf this step (e.g. `["reward"]`, `["actor", "critic"]`).
    """
    evidence = {"kl": kl, "warn_kl": cfg.warn_kl, "rollback_kl": cfg.rollback_kl, "nonfinite": list(nonfinite)}
    if nonfinite:
        return Verdict("rollback", f"non-finite {', '.join(nonfinite)}", evidence)
    if not math.isfinite(kl):
        return Verdict("rollback", "non-finite KL", {**evidence, "nonfinite": ["kl"]})
    if kl > cfg.rollback_kl:
        return Verdict("rollback", f"KL {kl:.4f} above rollback_kl {cfg.rollback_kl}", evidence)
    if kl > cfg.warn_kl:
        return Verdict("warn", f"KL {kl:.4f} above warn_kl {cfg.warn_kl}", evidence)
    return Verdict("ok", "", evidence)


def reward_filter_mask(scores: torch.Tensor, drop_middle_quantile: float) -> torch.Tensor:
    """PF-PPO policy filtration (Zhang et al. 2024, "Policy Filtration in RLHF to Fine-Tune LLM for
    Code Generation", arXiv:2409.06957).

    A reward model is least reliable for middling rewards and most reliable at the extremes, so
    training only on the samples whose rewards are clearly high or clearly low gives a cleaner
    signal. The samples are ranked by score (ties broken by position) and those whose rank falls in
    the central `drop_middle_quantile` share of the batch are dropped.

    Args:
        scores: `(batch,)` sequence scores.
        drop_middle_quantile: share in [0, 1) to drop around the median.

    Returns:
        `(batch,)` bool, True for the samples kept.
    """
    n = scores.numel()
    keep = torch.ones(n, dtype=torch.bool)
    drop = round(drop_middle_quantile * n)
    if drop <= 0 or n == 0:
        return keep
    drop = min(drop, n - 2) if n > 2 else 0  # always keep the best and the worst sample
    order = torch.sort(scores.detach().float().cpu(), stable=True).indices
    start = (n - drop) // 2
    keep[order[start:start + drop]] = False
    return keep


class ReplayBuffer:
    """High-confidence samples (kept by the filter) carried into the next step's update, at most
    `capacity` of them (the newest). Each sample is replayed once. Rows are JSON-friendly dicts
    (`prompt` and `response` token id lists, `score`), so the buffer is part of a checkpoint."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.rows: list[dict[str, Any]] = []

    def push(self, rows: Sequence[dict[str, Any]]) -> None:
        if self.capacity > 0:
            self.rows = list(rows)[-self.capacity:]

    def take(self) -> list[dict[str, Any]]:
        rows, self.rows = self.rows, []
        return rows

    def state_dict(self) -> dict[str, Any]:
        return {"rows": list(self.rows)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows = list(state.get("rows", []))[-self.capacity:] if self.capacity > 0 else []


def overfit_gap(train_reward: float, val_reward: float) -> tuple[float, bool]:
    """`(train - val, overfit)`: overfitting when validation trails training by more than 0.05."""
    gap = train_reward - val_reward
    return gap, gap > OVERFIT_MARGIN
