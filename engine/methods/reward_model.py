"""Reward models: Bradley-Terry training on preference pairs, and the pair task that it and
`engine.methods.rm_distill` share.

Both score every chosen and rejected sequence of a micro-batch inside one loss and one backward; the
sequences are grouped by length so that a long chosen does not pad a short rejected (see
`PairTask._scores`). The score is read at the last attended token (`engine.models.reward_scores`),
which is what `AutoModelForSequenceClassification` pools, so the saved model ranks the same outside
Keel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from engine import data as data_lib
from engine import models, packing
from engine.config import JobRequest, JobResult, RewardModelConfig
from engine.methods.supervised import run_supervised
from engine.runtime.reporting import Reporter

GROUP_OVERHEAD_TOKENS = 128
"""Fixed cost of one more forward pass, in tokens, when a micro-batch's sequences are split into
length groups (`PairTask._scores`)."""


# --- losses: pure tensor functions ------------------------------------------------------------------

def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor, margin: torch.Tensor | None = None,
                       center_coef: float = 0.0) -> torch.Tensor:
    """Per-pair loss `-log sigmoid(r_c - r_r - margin) + center_coef * (r_c + r_r)^2`.

    The centring term (Eisenstein et al. 2023) keeps the scores near 0 without changing the ranking.

    Args:
        chosen, rejected: `(pairs,)` scores.
        margin: `(pairs,)` required score gap, or None for 0.

    Returns:
        `(pairs,)`.
    """
    gap = chosen - rejected
    if margin is not None:
        gap = gap - margin
    loss = -F.logsigmoid(gap)
    if center_coef:
        loss = loss + center_coef * (chosen + rejected) ** 2
    return loss


# --- the part both tasks share: pairs scored in one loss and one backward ---------------------------------

class PairTask:
    """Preference pairs scored in one loss and one backward; `RewardModelTask` and
    `engine.methods.rm_distill.DistillTask` add their losses."""

    data_kind = "preference"
    row_cost = 2  # chosen and rejected: two sequences per pair in a micro-batch

    def __init__(self, request: JobRequest, device: torch.device) -> None:
        self.request, self.cfg, self.device = request, request.config, device

    def prepare(self) -> str | None:
        return None

    def _tokenize_pairs(self, rows: list[dict], tokenizer: Any) -> list[data_lib.PairExample]:
        d = self.cfg.data
        return data_lib.tokenize_preference(rows, tokenizer, d.max_total_length, d.truncation,
                                            max_prompt_length=d.max_prompt_length,
                                            filter_overlong_prompts=d.filter_overlong_prompts)

    @staticmethod
    def _pair(example: Any) -> data_lib.PairExample:
        return example

    def length(self, example: Any) -> int:
        pair = self._pair(example)
        return max(len(pair.chosen_ids), len(pair.rejected_ids))

    def tokens(self, example: Any) -> int:
        pair = self._pair(example)
        return len(pair.chosen_ids) + len(pair.rejected_ids)

    def weight(self, example: Any) -> float:
        return 1.0

    group_overhead = GROUP_OVERHEAD_TOKENS

    def _scores(self, model: nn.Module, pairs: Sequence[data_lib.PairExample]) -> tuple[torch.Tensor, ...]:
        """(chosen scores, rejected scores, real tokens, computed tokens) of a micro-batch.

        The 2n sequences (all chosen, then all rejected) are sorted by length and cut into a few
        groups (`data_lib.length_groups`), each padded to its own longest member and scored in its
        own forward; the scores are scattered back to their (pair, side) positions, and the caller
        computes one loss and runs one backward over all of them. Padding chosen and rejected
        together (one forward for the whole micro-batch) wastes half the compute when a long
        chosen sits beside a short rejected. The "one pass" that matters is kept: every sequence is
        scored once, by the same weights, inside one loss and one backward; chosen and rejected are
        never run as separate passes over the same pairs, and the scores (so the loss and the
        gradient) equal the single padded forward's up to float summation order (right padding
        never changes a sequence's attended positions). `computed tokens` counts what the groups
        really computed, so `perf/padding_efficiency` is real / computed.

        With packing (`model.use_remove_padding`) all 2n sequences are one forward over one row
        without padding (`engine.packing`): no groups, and computed tokens = real tokens.
        """
        seqs = [p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs]
        packed = packing.enabled(model)
        groups = ([list(range(len(seqs)))] if packed
                  else data_lib.length_groups([len(s) for s in seqs], self.group_overhead))
        parts, real, computed = [], 0.0, 0.0
        for group in groups:
            ids, mask = data_lib.pad([seqs[i] for i in group], self.pad_id)
            parts.append(models.reward_scores(model, ids.to(self.device), mask.to(self.device)))
            real += float(mask.sum())
            computed += float(mask.sum() if packed else mask.numel())
        order = torch.tensor([i for group in groups for i in group], dtype=torch.long)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(len(order))
        scores = torch.cat(parts)[inverse.to(parts[0].device)]
        n = len(pairs)
        return scores[:n], scores[n:], real, computed


# --- Bradley-Terry ------------------------------------------------------------------------------------

class RewardModelTask(PairTask):
    """`engine.methods.supervised.Task` for Bradley-Terry reward-model training."""

    stat_keys = ("loss_sum", "pairs", "correct", "margin_sum", "chosen_sum", "rejected_sum",
                 "real_tokens", "padded_tokens")

    def load_model(self) -> tuple[nn.Module, Any]:
        self.tokenizer = models.load_tokenizer(self.request.model_path)
        self.pad_id = self.tokenizer.pad_token_id
        return models.load_reward_model(self.request.model_path, self.cfg.model, trainable=True), self.tokenizer

    def tokenize(self, rows: list[dict], split: str) -> list[data_lib.PairExample]:
        return self._tokenize_pairs(rows, self.tokenizer)

    def forward(self, model: nn.Module, examples: Sequence[data_lib.PairExample]) -> tuple[torch.Tensor, dict]:
        chosen, rejected, real, padded = self._scores(model, examples)
        margin = torch.tensor([e.margin for e in examples], dtype=chosen.dtype, device=chosen.device)
        loss = bradley_terry_loss(chosen, rejected, margin, self.cfg.center_rewards_coefficient)
        with torch.no_grad():
            gap = chosen - rejected
            stats = {"loss_sum": loss.sum().item(), "pairs": float(len(examples)),
                     "correct": (gap > 0).sum().item(), "margin_sum": gap.sum().item(),
                     "chosen_sum": chosen.sum().item(), "rejected_sum": rejected.sum().item(),
                     "real_tokens": real, "padded_tokens": padded}
        return loss.sum(), stats

    def metrics(self, stats: Mapping[str, float], split: str) -> dict[str, float]:
        n = max(stats["pairs"], 1.0)
        prefix = "val/rm/" if split == "val" else "rm/"
        return {prefix + "loss": stats["loss_sum"] / n, prefix + "accuracy": stats["correct"] / n,
                prefix + "margin_mean": stats["margin_sum"] / n, prefix + "chosen_mean": stats["chosen_sum"] / n,
                prefix + "rejected_mean": stats["rejected_sum"] / n}


def run_reward_model(request: JobRequest, reporter: Reporter) -> JobResult:
    """Train a Bradley-Terry reward model on `preference` pairs (optional `margin` column)."""
    return run_supervised(request, reporter, RewardModelTask, config_cls=RewardModelConfig,
                          model_kind="reward_model")
