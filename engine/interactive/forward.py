"""`forward` and `forward_backward`: datums to tensors, one forward per micro-batch, the loss
function, and (for `forward_backward`) the backward pass into the accumulated gradients.

Micro-batches hold whole datums (whole (chosen, rejected) pairs for `dpo`) up to `MICRO_BATCH_TOKENS`
tokens; every loss is a sum over micro-batches (`dpo`'s mean over pairs divides by the call's pair
count), so how a call is cut changes nothing but float rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from engine import data as data_lib
from engine import packing
from engine.algos import (
    cispo_loss,
    cross_entropy_loss,
    dpo_loss,
    dro_loss,
    importance_sampling_loss,
    log_probs_from_logits,
    masked_sum,
    ppo_threshold_loss,
)
from engine.interactive.datums import ForwardRequest
from engine.runtime.precision import Precision

MICRO_BATCH_TOKENS = 4096
"""Tokens per forward pass (a longer datum, or pair, runs alone): bounds the `(tokens, vocab)` logits."""

ReferenceFn = Callable[[Sequence[Sequence[int]], Sequence[Sequence[int]]], torch.Tensor]
"""`(model inputs, target tokens) -> (batch, width)` log-probs of the DPO reference (no grad)."""


def token_log_probs(model: nn.Module, seqs: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                    device: torch.device, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of `targets[i][t]` given `seqs[i][:t + 1]`, for every position.

    Packed into one row when the model packs (`engine.packing`), else right-padded.

    Args:
        seqs, targets: token id lists, `len(targets[i]) == len(seqs[i]) > 0`.
        temperature: the logits are divided by it first (1: the model's own distribution).

    Returns:
        `(batch, width)` float32 log-probs (0 on padding) and the `(batch, width)` bool mask of real
        positions; `width` is the longest sequence.
    """
    lengths = [len(s) for s in seqs]
    width = max(lengths)
    mask = torch.arange(width, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]
    if packing.enabled(model):
        packed = packing.pack(seqs).to(device)
        flat_targets = torch.tensor([t for ts in targets for t in ts], dtype=torch.long, device=device)
        logits = model(**packed.model_inputs()).logits[0].float()
        if temperature != 1.0:
            logits = logits / temperature
        return packed.to_padded(log_probs_from_logits(logits, flat_targets)[None], width), mask
    ids, attention = data_lib.pad(seqs, 0)
    padded_targets, _ = data_lib.pad(targets, 0)
    logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = log_probs_from_logits(logits, padded_targets.to(device))
    return torch.where(mask, logp, torch.zeros((), dtype=logp.dtype, device=device)), mask


def _padded(rows: Sequence[Sequence[float]], width: int, device: torch.device) -> torch.Tensor:
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row, dtype=torch.float32)
    return out.to(device)


def micro_batches(lengths: Sequence[int], unit: int, budget: int = MICRO_BATCH_TOKENS) -> list[list[int]]:
    """Consecutive indices in groups of whole units (`unit` datums each) of at most `budget` tokens."""
    groups: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for start in range(0, len(lengths), unit):
        members = list(range(start, min(start + unit, len(lengths))))
        size = sum(lengths[i] for i in members)
        if current and tokens + size > budget:
            groups.append(current)
            current, tokens = [], 0
        current += members
        tokens += size
    if current:
        groups.append(current)
    return groups


class _Sums:
    """Metrics across micro-batches: weighted means (`add`) and plain totals (`total`)."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}
        self.totals: dict[str, float] = {}

    def add(self, name: str, value: float, weight: float = 1.0) -> None:
        entry = self.values.setdefault(name, [0.0, 0.0])
        entry[0] += value * weight
        entry[1] += weight

    def total(self, name: str, value: float) -> None:
        self.totals[name] = self.totals.get(name, 0.0) + value

    def means(self) -> dict[str, float]:
        return {**{k: s / w for k, (s, w) in self.values.items() if w > 0}, **self.totals}


POLICY_LOSSES: dict[str, Callable[..., tuple[torch.Tensor, dict[str, float]]]] = {
    "importance_sampling": importance_sampling_loss, "ppo": ppo_threshold_loss, "cispo": cispo_loss,
    "dro": dro_loss,
}
"""Tinker's policy-gradient losses, each called with the request's `loss_fn_config` as keywords."""


def run_forward(model: nn.Module, request: ForwardRequest, *, device: torch.device, precision: Precision,
                backward: bool, reference: ReferenceFn) -> dict[str, Any]:
    """Run `request` through `model`; with `backward`, add the loss's gradients to the parameters'.

    Returns:
        `{"loss_fn_outputs": [{"logprobs": [...]}, ...] (one per datum, in order), "metrics": {...},
        "tokens": int}`; `metrics["loss:sum"]` is the value of the loss the gradients are of.
    """
    data = request.data
    unit = 2 if request.loss_fn == "dpo" else 1
    pairs = len(data) // 2
    outputs: list[dict[str, list[float]]] = [{} for _ in data]
    sums = _Sums()
    loss_total = 0.0
    for index in micro_batches([len(d.model_input) for d in data], unit):
        batch = [data[i] for i in index]
        seqs = [d.model_input for d in batch]
        targets = [d.inputs["target_tokens"] for d in batch]
        with torch.set_grad_enabled(backward), precision.autocast():
            logp, mask = token_log_probs(model, seqs, targets, device)
            loss = _loss(request, batch, logp, mask, sums, device, reference, pairs)
        if backward:
            precision.backward(loss)
        loss_total += float(loss.detach())
        detached = logp.detach().cpu()
        for row, i in enumerate(index):
            outputs[i] = {"logprobs": detached[row, :len(data[i].model_input)].tolist()}
    metrics = {"loss:sum": loss_total, **sums.means()}
    return {"loss_fn_outputs": outputs, "metrics": {k: _finite(v) for k, v in metrics.items()},
            "tokens": request.tokens}


def _loss(request: ForwardRequest, batch: Sequence[Any], logp: torch.Tensor, mask: torch.Tensor, sums: _Sums,
          device: torch.device, reference: ReferenceFn, pairs: int) -> torch.Tensor:
    width = logp.shape[1]

    def column(name: str) -> torch.Tensor:
        return _padded([d.inputs[name] for d in batch], width, device)

    cfg = request.config
    if request.loss_fn == "cross_entropy":
        weights = column("weights")
        sums.total("weights:sum", float(weights.sum()))  # a sum over the call, whatever its micro-batches
        return cross_entropy_loss(logp, weights)
    if request.loss_fn in POLICY_LOSSES:
        advantages, sampler = column("advantages"), column("logprobs")
        # Tokens without advantage (prompt positions, whose `logprobs` are placeholders) count for
        # nothing, `dro`'s quadratic penalty included.
        counted = mask & (advantages != 0)
        n = float(counted.sum())
        loss, stats = POLICY_LOSSES[request.loss_fn](logp, sampler, advantages, counted, **cfg)
        for key, value in stats.items():
            sums.add(key, value, n)
        return loss
    # dpo: rows alternate chosen, rejected; the weights pick the response tokens of each.
    weights = column("weights")
    policy = masked_sum(weights * logp, weights != 0, dim=-1)
    if "ref_logprobs" in batch[0].inputs:
        ref_logp = column("ref_logprobs")
    else:
        ref_logp = reference([d.model_input for d in batch], [d.inputs["target_tokens"] for d in batch])
    ref = masked_sum(weights * ref_logp, weights != 0, dim=-1).to(policy.dtype)
    losses, chosen, rejected = dpo_loss(policy[0::2], policy[1::2], ref[0::2], ref[1::2], cfg["beta"])
    n = float(losses.shape[0])
    with torch.no_grad():
        sums.add("dpo/accuracy", float((chosen > rejected).float().mean()), n)
        sums.add("dpo/margin", float((chosen - rejected).mean()), n)
        sums.add("dpo/chosen_reward", float(chosen.mean()), n)
        sums.add("dpo/rejected_reward", float(rejected.mean()), n)
    return losses.sum() / pairs


def _finite(value: float) -> float | None:
    """JSON (and PostgreSQL's JSONB) has no NaN or infinity: those become null."""
    return float(value) if math.isfinite(value) else None
