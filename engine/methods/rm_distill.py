"""Reward-model distillation: a teacher reward model's pairwise preferences taught to a (smaller,
LoRA) student, with a held-out KL gate (`run_rm_distill`).

The teacher scores every train and validation pair once, before training, and the scores are cached
beside the checkpoints (`TEACHER_SCORES`); the student then trains on them with the pair scoring that
Bradley-Terry training uses (`engine.methods.reward_model.PairTask`).
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
from engine.config import JobRequest, JobResult, ModelConfig, RMDistillConfig
from engine.errors import ConfigError, DataError, GateFailed
from engine.methods import pair_scores
from engine.methods.reward_model import PairTask
from engine.methods.supervised import run_supervised, split_rows
from engine.runtime.artifacts import content_digest, for_request, join
from engine.runtime.reporting import Reporter

TEACHER_SCORES = "teacher_scores.parquet"
"""The teacher's scores of every train/val pair, written once beside the checkpoints."""


def bernoulli_kl(teacher_logit: torch.Tensor, student_logit: torch.Tensor) -> torch.Tensor:
    """`KL(Bern(sigmoid(t)) || Bern(sigmoid(s)))` per element, computed from logits with
    `logsigmoid` so neither probability's log underflows.

    `p (log p - log q) + (1 - p)(log(1 - p) - log(1 - q))` with `p = sigmoid(t)`, `q = sigmoid(s)`
    and `log(1 - sigmoid(x)) = logsigmoid(-x)`.
    """
    p = torch.sigmoid(teacher_logit)
    return (p * (F.logsigmoid(teacher_logit) - F.logsigmoid(student_logit))
            + (1 - p) * (F.logsigmoid(-teacher_logit) - F.logsigmoid(-student_logit)))


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


class DistillTask(PairTask):
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
