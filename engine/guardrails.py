"""The recipe's monitoring points as code: judge a step (KL, non-finite numbers), filter unreliable
rewards (PF-PPO), compare validation with training reward (overfitting) and notice generations
collapsing (low entropy, the same response to every prompt, one repeated token).

Pure functions and small containers; `engine.methods.ppo` acts on what they decide (rollback, warnings,
`Diverged`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from engine.algos import kl_penalty, masked_mean
from engine.config import GuardrailConfig

OVERFIT_MARGIN = 0.05
"""The recipe's evaluation gate: validation reward > training reward - 0.05 (rewards in [0, 1])."""
OVERFIT_SPREAD = 0.5
"""... and for rewards of any scale (a reward model's scores are unbounded): validation may trail
training by half a standard deviation of the training samples' scores before it counts."""
REPEAT_MIN_TOKENS = 4
"""A response of at least this many tokens, all one token id (EOS aside), is degenerate."""


@dataclass(frozen=True)
class Verdict:
    """What the guardrails say about a finished step."""

    action: Literal["ok", "warn", "rollback"]
    reason: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)


def judge_step(kl: float, nonfinite: Sequence[str], cfg: GuardrailConfig, *, step_kl: float) -> Verdict:
    """Roll back on non-finite numbers or `step_kl > rollback_kl`; warn on `kl > warn_kl`.

    A rollback undoes one step, so it judges what the step did (`step_kl`): the drift from the
    reference (`kl`) accumulates over a run that learns, and past `rollback_kl` every retry would
    start from a state already at the threshold and trip again until `Diverged`.

    Args:
        kl: the updated policy's KL to the reference on the step's samples (`guardrails/kl`).
        nonfinite: what was NaN/inf this step (e.g. `["reward"]`, `["actor", "critic"]`).
        step_kl: the updated policy's KL to the policy before the update (`guardrails/step_kl`).
    """
    evidence = {"kl": kl, "step_kl": step_kl, "warn_kl": cfg.warn_kl, "rollback_kl": cfg.rollback_kl,
                "nonfinite": list(nonfinite)}
    if nonfinite:
        return Verdict("rollback", f"non-finite {', '.join(nonfinite)}", evidence)
    if not (math.isfinite(kl) and math.isfinite(step_kl)):
        return Verdict("rollback", "non-finite KL", {**evidence, "nonfinite": ["kl"]})
    if step_kl > cfg.rollback_kl:
        return Verdict("rollback", f"step KL {step_kl:.4f} above rollback_kl {cfg.rollback_kl}", evidence)
    if kl > cfg.warn_kl:
        return Verdict("warn", f"KL {kl:.4f} above warn_kl {cfg.warn_kl}", evidence)
    return Verdict("ok", "", evidence)


def sequence_mean_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, mask: torch.Tensor,
                     kind: str) -> float:
    """Mean over sequences of each one's mean per-token KL estimate `kind` (`kl_penalty`'s names).

    Args:
        log_probs, ref_log_probs: `(batch, response_len)`.
        mask: `(batch, response_len)`, the mask of the rows the log-probs were computed on: a row
            with none (PF-PPO dropped it: its log-probs are zeros, not a policy's) counts for
            nothing, not for `exp(ref) - ref - 1`, nor as a zero.

    Returns:
        The mean (0.0 when no row has a token).
    """
    rows = mask.sum(-1) > 0
    if not bool(rows.any()):
        return 0.0
    per_row = masked_mean(kl_penalty(log_probs, ref_log_probs, kind), mask, dim=-1)
    return float(per_row[rows].mean())


def reward_filter_mask(scores: torch.Tensor, group_index: Sequence[Any], mode: str,
                       generator: torch.Generator) -> torch.Tensor:
    """PF-PPO policy filtration (Zhang et al. 2024, "Policy Filtration in RLHF to Fine-Tune LLM for
    Code Generation", arXiv:2409.06957), within each prompt's group of samples.

    A reward model is least reliable for middling rewards and most reliable at the extremes. In each
    group the best sample is kept with either the worst (`best_worst`) or one other sample chosen at
    random (`best_random`), the paper's two best-performing variants. Ties for best or worst are
    broken at random; a group whose scores all tie carries no ranking and is kept whole, and so is a
    group of one.

    Args:
        scores: `(batch,)` sequence scores.
        group_index: `(batch,)` prompt id per row.
        mode: `best_worst` or `best_random`.
        generator: the source of every random choice (seeded per step: a resumed run repeats it).

    Returns:
        `(batch,)` bool, True for the samples kept.
    """
    if mode not in ("best_worst", "best_random"):
        raise ValueError(f"unknown reward filter mode {mode!r}")
    values = scores.detach().float().cpu()
    groups: dict[Any, list[int]] = {}
    for row, uid in enumerate(group_index):
        groups.setdefault(uid, []).append(row)
    keep = torch.zeros(values.numel(), dtype=torch.bool)

    def pick(rows: list[int]) -> int:
        return rows[int(torch.randint(len(rows), (1,), generator=generator))]

    for rows in groups.values():
        group = values[rows]
        if len(rows) < 2 or bool((group == group[0]).all()):
            keep[rows] = True
            continue
        best = pick([r for r in rows if values[r] == group.max()])
        if mode == "best_worst":
            other = pick([r for r in rows if values[r] == group.min()])
        else:
            other = pick([r for r in rows if r != best])
        keep[[best, other]] = True
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


def overfit_gap(train_reward: float, val_reward: float, spread: float = 0.0) -> tuple[float, float, bool]:
    """`(train - val, margin, overfit)`: overfitting when validation trails training by more than
    `margin` = max(0.05, 0.5 * spread).

    A fixed 0.05 means something for rewards in [0, 1] only; on a reward model's unbounded scores
    the sampled training reward and the validation reward differ by more than that on every run
    (other prompts, other decoding). `spread` is the standard deviation of the training samples'
    scores, the scale the gap is read on.
    """
    gap = train_reward - val_reward
    margin = max(OVERFIT_MARGIN, OVERFIT_SPREAD * spread) if math.isfinite(spread) else OVERFIT_MARGIN
    return gap, margin, gap > margin


def distinct_ratio(responses: Sequence[Sequence[int]]) -> float:
    """Distinct responses / responses (1.0 for none): 1/n when every prompt got the same answer."""
    if not responses:
        return 1.0
    return len({tuple(r) for r in responses}) / len(responses)


def is_repeated_token(response: Sequence[int], eos_ids: Sequence[int] = ()) -> bool:
    """One token id repeated (`REPEAT_MIN_TOKENS` or more times; a final EOS aside)."""
    body = list(response)
    if body and body[-1] in eos_ids:
        body = body[:-1]
    return len(body) >= REPEAT_MIN_TOKENS and len(set(body)) == 1


def judge_collapse(entropy: float | None, responses: Sequence[Sequence[int]] | None, cfg: GuardrailConfig,
                   eos_ids: Sequence[int] = ()) -> Verdict:
    """Generations degenerate: `entropy` (`actor/entropy`) below `min_entropy`, or the distinct
    share of `responses` (one per validation prompt; None: not validated this step) below
    `min_distinct_ratio`. The verdict's action is `collapse_action`; evidence names the measures and
    the indices of up to 3 offending responses (repeated-token ones first)."""
    reasons: list[str] = []
    evidence: dict[str, Any] = {}
    if entropy is not None:
        evidence.update(entropy=entropy, min_entropy=cfg.min_entropy)
        if cfg.min_entropy is not None and entropy < cfg.min_entropy:
            reasons.append(f"entropy {entropy:.4f} below min_entropy {cfg.min_entropy}")
    if responses is not None:
        ratio = distinct_ratio(responses)
        repeated = [i for i, r in enumerate(responses) if is_repeated_token(r, eos_ids)]
        evidence.update(distinct_ratio=ratio, min_distinct_ratio=cfg.min_distinct_ratio,
                        repeated_token_responses=len(repeated))
        if cfg.min_distinct_ratio is not None and ratio < cfg.min_distinct_ratio:
            reasons.append(f"{ratio:.2f} of the validation responses are distinct "
                           f"(below min_distinct_ratio {cfg.min_distinct_ratio})")
        if reasons:
            counts: dict[tuple[int, ...], int] = {}
            for r in responses:
                counts[tuple(r)] = counts.get(tuple(r), 0) + 1
            common = max(counts, key=counts.__getitem__)
            ranked = repeated + [i for i, r in enumerate(responses) if tuple(r) == common and i not in repeated]
            evidence["sample_rows"] = ranked[:3]
    if not reasons:
        return Verdict("ok", "", evidence)
    return Verdict(cfg.collapse_action, "generations collapsed: " + "; ".join(reasons), evidence)
