"""Supervised fine-tuning: causal-LM loss on response tokens only (prompt tokens masked).

The loss is the mean negative log-likelihood over every response token of the optimizer step's
global batch (token-mean, so a long response weighs in proportion to its tokens however the batch
is cut into micro-batches and workers).

Token accuracy (`train/token_accuracy`, `val/token_accuracy`) is the share of those response tokens
whose argmax prediction is the target token, from the logits the loss already computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from engine import data as data_lib
from engine import models, packing
from engine.algos.logits import log_probs_from_logits
from engine.config import JobRequest, JobResult, SFTConfig
from engine.methods.supervised import run_supervised
from engine.runtime import ulysses
from engine.runtime.reporting import Reporter


def response_token_count(example: data_lib.SFTExample) -> int:
    """Tokens the loss covers: `input_ids[prompt_len:]`, except a first token nothing predicts."""
    return len(example.input_ids) - max(example.prompt_len, 1)


def sft_loss_sum(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 prompt_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed NLL of the response tokens.

    Args:
        input_ids, attention_mask: `(batch, seq)`, right-padded.
        prompt_lens: `(batch,)`; position `t` is a response token when `t >= prompt_len`.

    Returns:
        (NLL summed over response tokens, a scalar; the number of those tokens; how many of them the
        logits' argmax predicts, a detached count).
    """
    if packing.enabled(model):
        return _packed_loss_sum(model, packing.pack_padded(input_ids, attention_mask), prompt_lens)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    # Position t predicts token t + 1.
    targets = input_ids[:, 1:]
    logp = log_probs_from_logits(logits[:, :-1].float(), targets)
    positions = torch.arange(1, input_ids.shape[1], device=input_ids.device)
    mask = (positions[None, :] >= prompt_lens[:, None]) & attention_mask[:, 1:].bool()
    nll = torch.where(mask, -logp, torch.zeros((), dtype=logp.dtype, device=logp.device))
    return nll.sum(), mask.sum(), _correct(logits[:, :-1], targets, mask).sum()


def _packed_loss_sum(model: nn.Module, packed: packing.Packed,
                     prompt_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`sft_loss_sum` on one packed row: token k predicts token k + 1 when both are in the same
    sequence and k + 1 is a response token. Under Ulysses sequence parallelism each rank of the
    group computes the logits of `1/sp` of the tokens and the sums are the group's (`engine.runtime.ulysses`)."""
    targets = packed.input_ids[0, 1:]
    rows, cols = packed.padded_index(targets.device)
    mask = (rows[1:] == rows[:-1]) & (cols[1:] >= prompt_lens[rows[1:]])
    if ulysses.layout_of(model).size > 1:
        def per_token(logits: torch.Tensor, part: slice) -> tuple[torch.Tensor, torch.Tensor]:
            logp = log_probs_from_logits(logits.float(), targets[part])
            nll = torch.where(mask[part], -logp, torch.zeros((), dtype=logp.dtype, device=logp.device))
            return nll, _correct(logits, targets[part], mask[part]).float()

        flat = torch.arange(packed.total - 1, device=targets.device)
        nll, correct = ulysses.head_outputs(model, packed, flat, per_token)
        return nll.sum(), mask.sum(), correct.sum().detach()
    logits = model(**packed.model_inputs()).logits[0]
    logp = log_probs_from_logits(logits[:-1].float(), targets)
    nll = torch.where(mask, -logp, torch.zeros((), dtype=logp.dtype, device=logp.device))
    return nll.sum(), mask.sum(), _correct(logits[:-1], targets, mask).sum()


@torch.no_grad()
def _correct(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per position, whether it is masked in and its argmax prediction is the target: `logits`
    `(..., vocab)`, the rest `(...)`."""
    return (logits.argmax(-1) == targets) & mask


class SFTTask:
    """`engine.methods.supervised.Task` for SFT."""

    data_kind = "sft"
    row_cost = 1
    stat_keys = ("loss_sum", "tokens", "correct", "real_tokens", "padded_tokens")

    def __init__(self, request: JobRequest, device: torch.device) -> None:
        self.request, self.cfg, self.device = request, request.config, device

    def prepare(self) -> str | None:
        return None

    def load_model(self) -> tuple[nn.Module, Any]:
        self.tokenizer = models.load_tokenizer(self.request.model_path)
        self.pad_id = self.tokenizer.pad_token_id
        return models.load_policy(self.request.model_path, self.cfg.model, trainable=True), self.tokenizer

    def tokenize(self, rows: list[dict], split: str) -> list[data_lib.SFTExample]:
        d = self.cfg.data
        return data_lib.tokenize_sft(rows, self.tokenizer, d.max_prompt_length, d.max_response_length, d.truncation,
                                     max_length=d.max_length, filter_overlong_prompts=d.filter_overlong_prompts)

    def length(self, example: data_lib.SFTExample) -> int:
        return len(example.input_ids)

    def tokens(self, example: data_lib.SFTExample) -> int:
        return len(example.input_ids)

    def weight(self, example: data_lib.SFTExample) -> float:
        return float(response_token_count(example))

    def forward(self, model: nn.Module, examples: Sequence[data_lib.SFTExample]) -> tuple[torch.Tensor, dict]:
        ids, mask = data_lib.pad([e.input_ids for e in examples], self.pad_id)
        prompt_lens = torch.tensor([e.prompt_len for e in examples])
        loss_sum, tokens, correct = sft_loss_sum(model, ids.to(self.device), mask.to(self.device),
                                                 prompt_lens.to(self.device))
        computed = mask.sum() if packing.enabled(model) else mask.numel()  # packed: no padding
        return loss_sum, {"loss_sum": loss_sum.item(), "tokens": float(tokens), "correct": float(correct),
                          "real_tokens": float(mask.sum()), "padded_tokens": float(computed)}

    def metrics(self, stats: Mapping[str, float], split: str) -> dict[str, float]:
        tokens = max(stats["tokens"], 1.0)
        loss, accuracy = stats["loss_sum"] / tokens, stats["correct"] / tokens
        if split == "val":
            return {"val/loss": loss, "val/token_accuracy": accuracy}
        return {"train/loss": loss, "train/token_accuracy": accuracy, "train/response_tokens": stats["tokens"]}


def run_sft(request: JobRequest, reporter: Reporter) -> JobResult:
    """Fine-tune `request.model_path` on the `sft` dataset; the output is a policy."""
    return run_supervised(request, reporter, SFTTask, config_cls=SFTConfig, model_kind="policy")
