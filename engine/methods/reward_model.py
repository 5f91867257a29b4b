"""Reward models: Bradley-Terry training on preference pairs, and distillation of a teacher reward
model's pairwise preferences into a (smaller, LoRA) student.

Both score every chosen and rejected sequence of a micro-batch inside one loss and one backward; the
sequences are grouped by length so that a long chosen does not pad a short rejected (see
`_PairTask._scores`). The score is read at the last attended token (`engine.models.reward_scores`),
which is what `AutoModelForSequenceClassification` pools, so the saved model ranks the same outside
Keel.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from engine import data as data_lib
from engine import models, packing
from engine.config import JobRequest, JobResult, ModelConfig, RewardModelConfig, RMDistillConfig
from engine.errors import ConfigError, DataError, GateFailed
from engine.methods import pair_scores
from engine.methods.supervised import run_supervised, split_rows
from engine.runtime.artifacts import content_digest, for_request, join
from engine.runtime.reporting import Reporter

TEACHER_SCORES = "teacher_scores.parquet"
"""The teacher's scores of every train/val pair, written once beside the checkpoints."""
GROUP_OVERHEAD_TOKENS = 128
"""Fixed cost of one more forward pass, in tokens, when a micro-batch's sequences are split into
length groups (`_PairTask._scores`)."""


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


def bernoulli_kl(teacher_logit: torch.Tensor, student_logit: torch.Tensor) -> torch.Tensor:
    """`KL(Bern(sigmoid(t)) || Bern(sigmoid(s)))` per element, computed from logits with
    `logsigmoid` so neither probability's log underflows.

    `p (log p - log q) + (1 - p)(log(1 - p) - log(1 - q))` with `p = sigmoid(t)`, `q = sigmoid(s)`
    and `log(1 - sigmoid(x)) = logsigmoid(-x)`.
    """
    p = torch.sigmoid(teacher_logit)
    return (p * (F.logsigmoid(teacher_logit) - F.logsigmoid(student_logit))
            + (1 - p) * (F.logsigmoid(-teacher_logit) - F.logsigmoid(-student_logit)))


# --- the part both tasks share: pairs scored in one loss and one backward ---------------------------------

class _PairTask:
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

class RewardModelTask(_PairTask):
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


# --- distillation ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ScoredPair:
    """A preference pair (student tokens) with the teacher's two scores."""

    pair: data_lib.PairExample
    teacher_chosen: float
    teacher_rejected: float


def teacher_scores_path(request: JobRequest) -> str:
    """Beside the checkpoints: a local path or a URL (`engine.runtime.artifacts`)."""
    return join(request.checkpoint_dir, TEACHER_SCORES)


def _teacher_fingerprint(request: JobRequest) -> str:
    """What the cached scores depend on: the teacher's content (weights, config, tokenizer), the data
    files, the split and the tokenization. A hub id is its own identity."""
    teacher = request.teacher_path or ""
    d = request.config.data
    return json.dumps({"teacher": content_digest(teacher) if os.path.isdir(teacher) else teacher,
                       "train": content_digest(request.training_file),
                       "val": content_digest(request.validation_file), "seed": request.seed,
                       "max_length": d.max_total_length, "truncation": d.truncation,
                       "dtype": request.config.model.dtype, **data_lib.filter_key(d)}, sort_keys=True)


class DistillTask(_PairTask):
    """`engine.methods.supervised.Task` for reward-model distillation (student learns the teacher's pairwise
    preference probabilities, from teacher scores computed once in `prepare`)."""

    stat_keys = ("loss_sum", "kl_sum", "agree", "pairs", "real_tokens", "padded_tokens")

    # once per job, on rank 0: the teacher scores every pair, then is freed
    def prepare(self) -> str | None:
        if not self.request.teacher_path:
            raise ConfigError("rm_distill needs teacher_path (the teacher reward model)", param="teacher_path")
        store = for_request(self.request)
        path = teacher_scores_path(self.request)
        fingerprint = _teacher_fingerprint(self.request)
        if store.exists(path) and pair_scores.read(store.stage(path))[0] == fingerprint:
            return "reusing the teacher scores of an earlier attempt"
        teacher_cfg = ModelConfig(dtype=self.cfg.model.dtype, use_remove_padding=self.cfg.model.use_remove_padding)
        teacher = models.load_reward_model(self.request.teacher_path, teacher_cfg, trainable=False).to(self.device)
        # A teacher directory without tokenizer files must share the student's tokenizer.
        has_tokenizer = any(os.path.isfile(os.path.join(self.request.teacher_path, f))
                            for f in ("tokenizer.json", "tokenizer_config.json"))
        tokenizer = models.load_tokenizer(self.request.teacher_path if has_tokenizer or not
                                          os.path.isdir(self.request.teacher_path) else self.request.model_path)
        self.pad_id = tokenizer.pad_token_id
        columns: dict[str, list] = {"split": [], "row": [], "chosen": [], "rejected": []}
        for split, rows in zip(("train", "val"), split_rows(self.request, self.data_kind)):
            pairs = self._tokenize_pairs(rows, tokenizer)
            chosen, rejected = self._score_all(teacher, pairs)
            columns["split"] += [split] * len(pairs)
            columns["row"] += list(range(len(pairs)))
            columns["chosen"] += chosen
            columns["rejected"] += rejected
        del teacher
        with store.writing_file(path) as local:  # readers see the old file or the whole new one
            pair_scores.write(local, columns, fingerprint)
        return f"scored {len(columns['row'])} pairs with the teacher"

    @torch.no_grad()
    def _score_all(self, model: nn.Module, pairs: Sequence[data_lib.PairExample]) -> tuple[list, list]:
        chosen = [0.0] * len(pairs)
        rejected = [0.0] * len(pairs)
        if packing.enabled(model):  # the budget counts real tokens
            batches = packing.budget_batches([len(p.chosen_ids) + len(p.rejected_ids) for p in pairs],
                                             self.cfg.max_token_len_per_gpu)
        else:
            batches = data_lib.token_budget_batches([max(len(p.chosen_ids), len(p.rejected_ids)) for p in pairs],
                                                    max(1, self.cfg.max_token_len_per_gpu // 2))
        for batch in batches:
            c, r, _, _ = self._scores(model, [pairs[i] for i in batch])
            for i, ci, ri in zip(batch, c.tolist(), r.tolist()):
                chosen[i], rejected[i] = ci, ri
        return chosen, rejected

    # in every worker
    def load_model(self) -> tuple[nn.Module, Any]:
        self.tokenizer = models.load_tokenizer(self.request.model_path)
        self.pad_id = self.tokenizer.pad_token_id
        _, self.teacher = pair_scores.read(for_request(self.request).stage(teacher_scores_path(self.request)))
        chosen, rejected = self.teacher["train"]
        # `mse` regresses standardised teacher gaps; the student's gap times this scale is in
        # teacher units again (for the KL and the gate).
        self.scale = float(np.concatenate([chosen, rejected]).std()) if self.cfg.loss == "mse" else 1.0
        if not self.scale > 0:
            raise DataError("the teacher gives every training response the same score", param="teacher_path")
        return models.load_reward_model(self.request.model_path, self.cfg.model, trainable=True), self.tokenizer

    def tokenize(self, rows: list[dict], split: str) -> list[ScoredPair]:
        pairs = self._tokenize_pairs(rows, self.tokenizer)
        chosen, rejected = self.teacher[split]
        if len(chosen) != len(pairs):
            raise DataError(f"the teacher scores hold {len(chosen)} {split} pairs, the data {len(pairs)}",
                            param="training_file")
        return [ScoredPair(p, float(c), float(r)) for p, c, r in zip(pairs, chosen, rejected)]

    @staticmethod
    def _pair(example: ScoredPair) -> data_lib.PairExample:
        return example.pair

    def forward(self, model: nn.Module, examples: Sequence[ScoredPair]) -> tuple[torch.Tensor, dict]:
        chosen, rejected, real, padded = self._scores(model, [e.pair for e in examples])
        student_gap = chosen - rejected
        teacher_gap = torch.tensor([e.teacher_chosen - e.teacher_rejected for e in examples],
                                   dtype=student_gap.dtype, device=student_gap.device)
        kl = bernoulli_kl(teacher_gap, student_gap * self.scale)
        loss = kl if self.cfg.loss == "kl" else (student_gap - teacher_gap / self.scale) ** 2
        with torch.no_grad():
            stats = {"loss_sum": loss.sum().item(), "kl_sum": kl.sum().item(),
                     "agree": ((student_gap > 0) == (teacher_gap > 0)).sum().item(),
                     "pairs": float(len(examples)), "real_tokens": real, "padded_tokens": padded}
        return loss.sum(), stats

    def metrics(self, stats: Mapping[str, float], split: str) -> dict[str, float]:
        n = max(stats["pairs"], 1.0)
        if split == "val":
            return {"distill/val_kl": stats["kl_sum"] / n, "distill/agreement": stats["agree"] / n,
                    "distill/val_loss": stats["loss_sum"] / n}
        return {"distill/loss": stats["loss_sum"] / n, "distill/kl": stats["kl_sum"] / n,
                "distill/train_agreement": stats["agree"] / n}


def check_distill_gate(metrics: Mapping[str, float], gate_kl: float) -> None:
    """Raise `GateFailed` (code `distill_gate`) unless the held-out mean KL is below `gate_kl`."""
    kl = metrics.get("distill/val_kl")
    if kl is None:
        raise DataError("no held-out pairs to measure the distillation gate on", param="validation_file")
    if not kl < gate_kl:
        raise GateFailed(
            f"the distilled reward model's held-out KL from the teacher is {kl:.4f}, not below the gate "
            f"{gate_kl} (agreement with the teacher {metrics.get('distill/agreement', float('nan')):.1%}); "
            "train longer, raise lora_rank or use a larger student",
            param="gate_kl", data={"val_kl": kl, "gate_kl": gate_kl,
                                   "agreement": metrics.get("distill/agreement")})


def run_rm_distill(request: JobRequest, reporter: Reporter) -> JobResult:
    """Distil the reward model at `request.teacher_path` into `request.model_path` (LoRA by default,
    rank by size); fails with `distill_gate` when the held-out KL is not below `gate_kl`."""
    gate = request.config.gate_kl if isinstance(request.config, RMDistillConfig) else 0.0
    return run_supervised(request, reporter, DistillTask, config_cls=RMDistillConfig, model_kind="reward_model",
                          final_check=lambda metrics: check_distill_gate(metrics, gate))
