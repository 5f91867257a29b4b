"""Offline preference optimisation of a policy on preference pairs: DPO, conservative DPO and IPO.

The loss (`engine.algos.dpo_loss`) compares how much more the policy than a frozen reference prefers
each chosen response to its rejected one; a response's log-probability is the sum (IPO: the mean)
of its tokens' log-probs, prompt tokens masked. The reference is the model at `model` (with LoRA,
that is the base the adapter sits on, adapter off). Its log-probs never change, so they are computed
once, on rank 0 before training (`DPOTask.prepare`), and cached beside the checkpoints under a key
made of content hashes of the reference's files and of the data plus the tokenization settings: a
resumed or repeated run reuses them, a changed reference (even one of the same size) recomputes them.

Everything else is the shared supervised loop (`engine.methods.supervised`): token-budget micro-batches,
packing, mixed precision, LoRA, data parallelism, checkpoints and exact resume. The output is a
policy, saved like SFT's.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from engine import data as data_lib
from engine import models, packing
from engine.algos.logits import log_probs_from_logits
from engine.algos.preference import dpo_loss
from engine.config import DPOConfig, JobRequest, JobResult
from engine.errors import DataError
from engine.methods import pair_scores
from engine.methods.supervised import run_supervised, split_rows
from engine.runtime.artifacts import content_digest, for_request, join
from engine.runtime.precision import autocast
from engine.runtime.reporting import Reporter

REFERENCE_LOGPS = "reference_logps.parquet"
"""The reference's response log-prob sums of every train/val pair, written once beside the checkpoints."""
CACHE_VERSION = 2
"""Part of the cache key: bump when what the cache holds, or how it is computed, changes."""


# --- response log-probs -----------------------------------------------------------------------------

def response_log_probs(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       prompt_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of the response tokens' log-probs per sequence, and how many there are.

    Token `t` is a response token when `t >= prompt_len` (and `t >= 1`: nothing predicts the first
    token); position `t - 1` predicts it. Only those positions' logits are computed
    (`engine.models.logits_at`, packed when the model packs).

    Args:
        input_ids, attention_mask: `(batch, seq)`, right-padded.
        prompt_lens: `(batch,)` prompt tokens at the start of each row.

    Returns:
        `(batch,)` float32 sums and `(batch,)` integer counts.
    """
    lengths = attention_mask.sum(-1)
    start = prompt_lens.clamp(min=1)
    counts = (lengths - start).clamp(min=0)
    width = max(1, int(counts.max()))
    offsets = torch.arange(width, device=input_ids.device)
    mask = offsets[None, :] < counts[:, None]
    last = input_ids.shape[1] - 1
    # Positions past a row's response are masked out; clamped so that every gather stays in the row.
    positions = ((start - 1)[:, None] + offsets[None, :]).clamp(max=last - 1 if last > 0 else 0)
    labels = input_ids.gather(1, (positions + 1).clamp(max=last))
    logits = models.logits_at(model, input_ids, attention_mask, positions).float()
    logp = log_probs_from_logits(logits, labels)
    sums = torch.where(mask, logp, torch.zeros((), dtype=logp.dtype, device=logp.device)).sum(-1)
    return sums, counts


# --- the reference cache ------------------------------------------------------------------------------

def reference_logps_path(request: JobRequest) -> str:
    """Beside the checkpoints: a local path or a URL (`engine.runtime.artifacts`)."""
    return join(request.checkpoint_dir, REFERENCE_LOGPS)


def model_digest(path: str) -> str:
    """Content hash of a model directory (`engine.runtime.artifacts.content_digest`: every file's relative
    name and bytes: weights, config, tokenizer), and for an adapter directory its base model's too.
    A hub id is its name (Keel cannot read a hub model's files before loading it)."""
    if not os.path.isdir(path):
        return f"hub:{path}"
    digest = content_digest(path)
    if os.path.isfile(os.path.join(path, "adapter_config.json")):
        digest += ":" + model_digest(models.adapter_base(path))
    return digest


def reference_key(request: JobRequest) -> str:
    """What the cached log-probs depend on: the reference's content, the data, the split (seed),
    the tokenization and how the reference is run (dtype, packing)."""
    cfg = request.config
    return json.dumps({
        "version": CACHE_VERSION, "reference": model_digest(request.model_path),
        "train": content_digest(request.training_file), "val": content_digest(request.validation_file),
        "seed": request.seed, "max_length": cfg.data.max_total_length, "truncation": cfg.data.truncation,
        "dtype": cfg.model.dtype, "packed": cfg.model.use_remove_padding, **data_lib.filter_key(cfg.data)},
        sort_keys=True)


def read_reference_logps(path: str) -> tuple[str | None, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """(key, {split: (chosen sums, rejected sums)}) of a cache file (`engine.methods.pair_scores`)."""
    return pair_scores.read(path)


# --- the task -----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DPOExample:
    """A tokenized pair with its reference log-prob sums (response tokens only)."""

    pair: data_lib.PairExample
    ref_chosen: float
    ref_rejected: float


class DPOTask:
    """`engine.methods.supervised.Task` for DPO / cDPO / IPO."""

    data_kind = "preference"
    row_cost = 2  # chosen and rejected: two sequences per pair in a micro-batch
    stat_keys = ("loss_sum", "pairs", "correct", "chosen_reward_sum", "rejected_reward_sum",
                 "chosen_logp_sum", "rejected_logp_sum", "response_tokens", "real_tokens", "padded_tokens")

    def __init__(self, request: JobRequest, device: torch.device) -> None:
        self.request, self.cfg, self.device = request, request.config, device

    # once per job, on rank 0: the reference scores every pair, then is freed
    def prepare(self) -> str | None:
        store = for_request(self.request)
        path = reference_logps_path(self.request)
        key = reference_key(self.request)
        if store.exists(path) and read_reference_logps(store.stage(path))[0] == key:
            return "reusing the reference log-probs of an earlier attempt"
        # The policy before any update (an adapter given as `model` applied), on its precision path.
        reference = models.load_reference(self.request.model_path, self.cfg.model).to(self.device)
        self.tokenizer = models.load_tokenizer(self.request.model_path)
        self.pad_id = self.tokenizer.pad_token_id
        columns: dict[str, list] = {"split": [], "row": [], "chosen": [], "rejected": []}
        for split, rows in zip(("train", "val"), split_rows(self.request, self.data_kind)):
            pairs = self._tokenize_pairs(rows)
            chosen, rejected = self._reference_all(reference, pairs)
            columns["split"] += [split] * len(pairs)
            columns["row"] += list(range(len(pairs)))
            columns["chosen"] += chosen
            columns["rejected"] += rejected
        del reference
        with store.writing_file(path) as local:  # readers see the old file or the whole new one
            pair_scores.write(local, columns, key)
        return f"computed the reference log-probs of {len(columns['row'])} pairs"

    @torch.no_grad()
    def _reference_all(self, model: nn.Module, pairs: Sequence[data_lib.PairExample]) -> tuple[list, list]:
        chosen = [0.0] * len(pairs)
        rejected = [0.0] * len(pairs)
        if packing.enabled(model):  # the budget counts real tokens
            batches = packing.budget_batches([self.tokens(p) for p in pairs], self.cfg.max_token_len_per_gpu)
        else:
            batches = data_lib.token_budget_batches([self.length(p) for p in pairs],
                                                    max(1, self.cfg.max_token_len_per_gpu // self.row_cost))
        for batch in batches:
            with autocast(self.device, self.cfg.model.dtype):
                sums, _, _, _ = self._log_probs(model, [pairs[i] for i in batch])
            n = len(batch)
            for j, i in enumerate(batch):
                chosen[i], rejected[i] = float(sums[j]), float(sums[n + j])
        return chosen, rejected

    # in every worker
    def load_model(self) -> tuple[nn.Module, Any]:
        self.tokenizer = models.load_tokenizer(self.request.model_path)
        self.pad_id = self.tokenizer.pad_token_id
        _, self.reference = read_reference_logps(for_request(self.request).stage(reference_logps_path(self.request)))
        return models.load_policy(self.request.model_path, self.cfg.model, trainable=True), self.tokenizer

    def _tokenize_pairs(self, rows: list[dict]) -> list[data_lib.PairExample]:
        d = self.cfg.data
        return data_lib.tokenize_preference(rows, self.tokenizer, d.max_total_length, d.truncation,
                                            max_prompt_length=d.max_prompt_length,
                                            filter_overlong_prompts=d.filter_overlong_prompts)

    def tokenize(self, rows: list[dict], split: str) -> list[DPOExample]:
        pairs = self._tokenize_pairs(rows)
        chosen, rejected = self.reference[split]
        if len(chosen) != len(pairs):
            raise DataError(f"the reference log-probs hold {len(chosen)} {split} pairs, the data {len(pairs)}",
                            param="training_file")
        return [DPOExample(p, float(c), float(r)) for p, c, r in zip(pairs, chosen, rejected)]

    @staticmethod
    def _pair(example: DPOExample | data_lib.PairExample) -> data_lib.PairExample:
        return example.pair if isinstance(example, DPOExample) else example

    def length(self, example: DPOExample | data_lib.PairExample) -> int:
        pair = self._pair(example)
        return max(len(pair.chosen_ids), len(pair.rejected_ids))

    def tokens(self, example: DPOExample | data_lib.PairExample) -> int:
        pair = self._pair(example)
        return len(pair.chosen_ids) + len(pair.rejected_ids)

    def weight(self, example: DPOExample) -> float:
        return 1.0  # the loss is a mean over pairs

    def _log_probs(self, model: nn.Module, pairs: Sequence[data_lib.PairExample]) -> tuple[torch.Tensor, ...]:
        """(response log-prob sums `(2n,)`: all chosen, then all rejected; response token counts
        `(2n,)`; real tokens; computed tokens) in one forward over the micro-batch's 2n sequences."""
        seqs = [p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs]
        prompt_lens = [p.chosen_prompt_len for p in pairs] + [p.rejected_prompt_len for p in pairs]
        ids, mask = data_lib.pad(seqs, self.pad_id)
        sums, counts = response_log_probs(model, ids.to(self.device), mask.to(self.device),
                                          torch.tensor(prompt_lens, device=self.device))
        real = float(mask.sum())
        return sums, counts, real, real if packing.enabled(model) else float(mask.numel())

    def forward(self, model: nn.Module, examples: Sequence[DPOExample]) -> tuple[torch.Tensor, dict]:
        n = len(examples)
        sums, counts, real, computed = self._log_probs(model, [e.pair for e in examples])
        ref = torch.tensor([e.ref_chosen for e in examples] + [e.ref_rejected for e in examples],
                           dtype=sums.dtype, device=sums.device)
        policy = sums
        if self.cfg.loss_type == "ipo":  # IPO is defined on per-token mean log-probs
            per_token = counts.clamp(min=1).to(sums.dtype)
            policy, ref = sums / per_token, ref / per_token
        losses, chosen_rewards, rejected_rewards = dpo_loss(
            policy[:n], policy[n:], ref[:n], ref[n:], self.cfg.beta, self.cfg.loss_type, self.cfg.label_smoothing)
        with torch.no_grad():
            stats = {"loss_sum": losses.sum().item(), "pairs": float(n),
                     "correct": (chosen_rewards > rejected_rewards).sum().item(),
                     "chosen_reward_sum": chosen_rewards.sum().item(),
                     "rejected_reward_sum": rejected_rewards.sum().item(),
                     "chosen_logp_sum": policy[:n].sum().item(), "rejected_logp_sum": policy[n:].sum().item(),
                     "response_tokens": float(counts.sum()), "real_tokens": real, "padded_tokens": computed}
        return losses.sum(), stats

    def metrics(self, stats: Mapping[str, float], split: str) -> dict[str, float]:
        """TRL's names: `rewards/*` are `beta * (policy - reference)` log-probs, means over pairs."""
        n = max(stats["pairs"], 1.0)
        prefix = "val/" if split == "val" else ""
        chosen, rejected = stats["chosen_reward_sum"] / n, stats["rejected_reward_sum"] / n
        tokens = {} if split == "val" else {"train/response_tokens": stats["response_tokens"]}
        return {**tokens, prefix + "rewards/chosen": chosen, prefix + "rewards/rejected": rejected,
                prefix + "rewards/accuracies": stats["correct"] / n, prefix + "rewards/margins": chosen - rejected,
                prefix + "logps/chosen": stats["chosen_logp_sum"] / n,
                prefix + "logps/rejected": stats["rejected_logp_sum"] / n,
                ("val/loss" if split == "val" else "train/loss"): stats["loss_sum"] / n}


def run_dpo(request: JobRequest, reporter: Reporter) -> JobResult:
    """Optimise the policy at `request.model_path` on `preference` pairs against itself as the frozen
    reference; the output is a policy."""
    return run_supervised(request, reporter, DPOTask, config_cls=DPOConfig, model_kind="policy")
