"""The batched forwards the roles run: rows cut into micro-batches (by count or token budget), the
policy's per-token log-probs (and entropy) of a micro-batch, packed or padded, whole or split across a
sequence-parallel group, and log-probs of a whole batch without gradient.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal

import torch
from torch import nn

from engine import packing
from engine.algos import last_index, log_probs_and_entropy, log_probs_from_logits
from engine.config import PPOConfig
from engine.models import logits_at
from engine.roles.batch import (
    Batch,
    concat,
    micro_batches,
    mini_batch_rows,
    num_rows,
    response_positions,
    row_lengths,
    select,
    trim,
)
from engine.rollout import prefix
from engine.runtime import ulysses

SEQ_KEYS = ("input_ids", "attention_mask")


def trim_rows(batch: Batch, device: torch.device) -> Batch:
    """A micro-batch cut to its longest sequence and longest response, on `device`."""
    out = trim(batch)
    # Through the last 1 of any row, not the 1s' count: a multi-turn episode's mask has holes.
    resp_width = max(1, int(last_index(batch["response_mask"]).max()) + 1)
    return {k: (v if k in SEQ_KEYS or v.dim() < 2 else v[:, :resp_width]).to(device) for k, v in out.items()}


def pad_response(x: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad a `(batch, r)` tensor with zeros to `(batch, width)`."""
    return torch.nn.functional.pad(x, (0, width - x.shape[1]))


def iter_micro_batches(batch: Batch, rows: Sequence[int], *, dynamic: bool, max_tokens: int, size: int,
                       device: torch.device, packed: bool = False,
                       model: nn.Module | None = None) -> Iterator[tuple[list[int], Batch]]:
    """`(global row indices, trimmed micro-batch)` over `rows` of `batch` (`packed`: the model
    packs its rows, so the token budget counts real tokens).

    `model` (the policy that scores the micro-batches) with `dynamic`: when rows share a prompt
    and `engine.rollout.prefix` runs the model (each distinct prompt once), a prompt's rows stay in one
    micro-batch and the budget counts the prompt once.
    """
    all_lengths = row_lengths(batch)
    lengths = [all_lengths[i] for i in rows]
    groups = None
    if model is not None and dynamic and rows:
        sub = select(batch, list(rows))
        groups = prefix.row_groups(sub["input_ids"], sub["prompt_lens"])
        if len(groups) == len(rows) or not prefix.supports(model) or ulysses.layout_of(model).size > 1:
            groups = None
    if groups is not None:
        prompt_lens = sub["prompt_lens"].tolist()
        costs = [prompt_lens[g[0]] + sum(lengths[i] - prompt_lens[i] for i in g) for g in groups]
        units = [[i for u in unit for i in groups[u]] for unit in packing.budget_batches(costs, max_tokens)]
    else:
        units = micro_batches(lengths, dynamic=dynamic, max_tokens=max_tokens, size=size, packed=packed)
    for group in units:
        index = [rows[i] for i in group]
        yield index, trim_rows(select(batch, index), device)


def policy_log_probs(model: nn.Module, mb: Batch, *, temperature: float,
                     entropy: Literal["off", "grad", "metric"] = "off") -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs `(b, r)` of the response tokens of a trimmed micro-batch under `model` (logits divided
    by the sampling temperature, as in VERL), and the per-token entropy unless `entropy="off"`.

    Only the response positions' logits are computed (`engine.models.logits_at`; rows that share a
    prompt through `engine.rollout.prefix`, the prompt once). The entropy is a full-vocabulary softmax per
    token: `grad` keeps it in the graph (a loss term), `metric` computes it detached, so backward
    stores nothing for it.
    """
    if ulysses.layout_of(model).size > 1:
        return _sharded_log_probs(model, mb, temperature=temperature, entropy=entropy)
    groups = prefix.row_groups(mb["input_ids"], mb["prompt_lens"])
    if len(groups) < len(mb["prompt_lens"]) and prefix.supports(model):
        logits = prefix.response_logits(model, mb["input_ids"], mb["prompt_lens"], mb["responses"], groups).float()
    else:
        positions = response_positions(mb["prompt_lens"], mb["responses"].shape[1], mb["input_ids"].shape[1])
        logits = logits_at(model, mb["input_ids"], mb["attention_mask"], positions).float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    if entropy == "off":
        return log_probs_from_logits(logits, mb["responses"]), None
    return log_probs_and_entropy(logits, mb["responses"], entropy_grad=entropy == "grad")


def _sharded_log_probs(model: nn.Module, mb: Batch, *, temperature: float,
                       entropy: Literal["off", "grad", "metric"]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`policy_log_probs` under Ulysses sequence parallelism: each rank of the group takes the LM head
    and the log-softmax at `1/sp` of the response positions; the `(b, r)` results are the group's sums
    (`engine.runtime.ulysses.head_outputs`)."""
    packed = packing.pack_padded(mb["input_ids"], mb["attention_mask"])
    positions = response_positions(mb["prompt_lens"], mb["responses"].shape[1], mb["input_ids"].shape[1])
    index = torch.arange(packed.total, device=positions.device)[None, :]
    flat = packed.at(index, positions).reshape(-1)  # packed token of each (row, response position)
    targets = mb["responses"].reshape(-1)

    def per_token(logits: torch.Tensor, part: slice) -> list[torch.Tensor]:
        logits = logits.float()
        if temperature > 0 and temperature != 1.0:
            logits = logits / temperature
        if entropy == "off":
            return [log_probs_from_logits(logits, targets[part])]
        return list(log_probs_and_entropy(logits, targets[part], entropy_grad=entropy == "grad"))

    outs = [o.view_as(mb["responses"]) for o in ulysses.head_outputs(model, packed, flat, per_token)]
    return outs[0], (outs[1] if entropy != "off" else None)


def share_rows(batch: Batch, lay: ulysses.Layout,
               sizes: Sequence[int] | None = None) -> tuple[Batch, list[int], list[int]]:
    """The rows of a sequence-parallel group: every rank of `lay`'s group gets the same batch.

    Each rank brings its own rows (cut into mini-batches of `sizes`, one without); the group's batch
    holds mini-batch `k` of every rank, in rank order, then mini-batch `k + 1`: with `shard_rows`'s
    layout that is the global order. Returns `(group batch, its mini-batch sizes, where this rank's
    rows sit in it)`.
    """
    sizes = list(sizes) if sizes is not None else [num_rows(batch)]
    parts = ulysses.gather_objects((batch, sizes), lay)
    pieces, group_sizes, mine, offset = [], [], [], 0
    for k in range(len(sizes)):
        group_sizes.append(0)
        for rank, (part, part_sizes) in enumerate(parts):
            rows = mini_batch_rows(part_sizes)[k]
            pieces.append(select(part, rows))
            if rank == lay.rank:
                mine.extend(range(offset, offset + len(rows)))
            offset += len(rows)
            group_sizes[-1] += len(rows)
    return concat(pieces), group_sizes, mine


@torch.no_grad()
def batched_log_probs(model: nn.Module, batch: Batch, *, temperature: float, dynamic: bool, max_tokens: int,
                      size: int, device: torch.device) -> torch.Tensor:
    """`(batch, R)` response log-probs for a whole batch, micro-batched, on CPU (zeros on padding).
    Under Ulysses sequence parallelism the group's ranks score the group's rows together, each
    returning its own."""
    kw = {"temperature": temperature, "dynamic": dynamic, "max_tokens": max_tokens, "size": size, "device": device}
    lay = ulysses.layout_of(model)
    if lay.size == 1:
        return _batched_log_probs(model, batch, **kw)
    group, _, mine = share_rows(batch, lay)
    return _batched_log_probs(model, group, **kw)[mine]


def role_log_probs(model: nn.Module, batch: Batch, config: PPOConfig, device: torch.device) -> torch.Tensor:
    """`batched_log_probs` as PPO's roles score responses: at the sampling temperature, micro-batched as
    the actor's updates are (`config.actor`)."""
    a = config.actor
    return batched_log_probs(model, batch, temperature=config.rollout.temperature, dynamic=a.use_dynamic_bsz,
                             max_tokens=a.ppo_max_token_len_per_gpu, size=a.ppo_micro_batch_size_per_gpu,
                             device=device)


def _batched_log_probs(model: nn.Module, batch: Batch, *, temperature: float, dynamic: bool, max_tokens: int,
                       size: int, device: torch.device) -> torch.Tensor:
    width = batch["responses"].shape[1]
    out = torch.zeros(batch["responses"].shape, dtype=torch.float32)
    was_training = model.training
    model.eval()
    try:
        for index, mb in iter_micro_batches(batch, range(len(batch["input_ids"])), dynamic=dynamic,
                                            max_tokens=max_tokens, size=size, device=device,
                                            packed=packing.enabled(model), model=model):
            log_probs, _ = policy_log_probs(model, mb, temperature=temperature)
            out[index] = pad_response(log_probs, width).cpu()
    finally:
        model.train(was_training)
    return out
