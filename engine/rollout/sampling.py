"""What every rollout backend shares: how to decode (`SamplingParams`), counter-based sampling,
the stop tokens, and the fingerprint of the weights a backend samples from.

Sampling is counter-based: row `i` at step `t` draws its token by inverting its distribution's
CDF at one uniform that is a hash of (`seeds[i]`, `t`), so a row's sample depends only on its seed
and its logits, not on which other rows share the batch or on any global RNG state. Splitting a
batch across data-parallel workers, or resuming a job, therefore draws the same responses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from engine.errors import EngineError

M32 = 0xFFFFFFFF
"""Seeds and hashes are 32-bit: values are masked with this."""
_MIX = 0x45D9F3B
"""Multiplier of a well-mixing 32-bit integer hash; small enough that products fit in int64."""


@dataclass(frozen=True)
class SamplingParams:
    """How to decode (VERL `actor_rollout_ref.rollout` names)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    """-1 disables top-k."""
    do_sample: bool = True

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature <= 0


def weights_fingerprint(model: torch.nn.Module) -> float:
    """A cheap fingerprint of the weights being trained (a LoRA model's: the adapter, its delta):
    per trainable tensor (this worker's shard under fsdp2) its float64 sum and absolute sum, mixed
    with the tensor's position. One device sync; any optimizer step changes it. Rollout batches
    carry it, so a batch sampled from weights the trainer no longer holds is refused."""
    sums = []
    for p in model.parameters():
        if p.requires_grad:
            t = p.detach()
            t = t.to_local() if hasattr(t, "to_local") else t
            t = t.double()
            sums.append(t.sum() + 0.5 * t.abs().sum())
    if not sums:
        return 0.0
    stacked = torch.stack(sums)
    weights = torch.arange(1, len(sums) + 1, dtype=torch.float64, device=stacked.device).reciprocal_().add_(1.0)
    return float((stacked * weights).sum())


# --- counter-based sampling ----------------------------------------------------------------------

def mix32(x: Any) -> Any:
    """A 32-bit integer hash (works on Python ints and int64 tensors holding values < 2**32)."""
    x = ((x >> 16) ^ x) * _MIX & M32
    x = ((x >> 16) ^ x) * _MIX & M32
    return (x >> 16) ^ x


def row_seed(*parts: int) -> int:
    """Combine integers (job seed, batch number, row...) into one 32-bit row seed."""
    h = 0x12345678
    for p in parts:
        h = mix32((h ^ mix32(p & M32)) + 0x9E3779B9 & M32)
    return h


def row_uniforms(seeds: torch.Tensor, step: int) -> torch.Tensor:
    """`(batch,)` float64 uniforms in (0, 1), a pure function of (seed, step): 2**32 evenly spaced
    values, each the midpoint of its cell, so neither end is reachable."""
    key = mix32((mix32(seeds & M32) + step * 0x9E3779B) & M32)
    return key.double().add_(0.5).div_(2.0**32)


def filter_logits(logits: torch.Tensor, top_k: int = -1, top_p: float = 1.0) -> torch.Tensor:
    """Set to -inf the logits outside the top-k and outside the smallest nucleus of mass >= top_p."""
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the mass strictly before it already reaches top_p (the first always stays).
        drop_sorted = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_tokens(logits: torch.Tensor, seeds: torch.Tensor, step: int, params: SamplingParams) -> torch.Tensor:
    """Next token per row: argmax when greedy, else an exact sample of softmax(logits / T) over the
    filtered set, by inverse CDF: the first token whose cumulative mass exceeds `u * total`, `u` from
    `row_uniforms`. One hash per row where the Gumbel-max trick needs one per vocabulary entry and two
    logarithms each (about a third of a sampled decode step on a small model)."""
    if params.greedy:
        return logits.argmax(dim=-1)
    scaled = logits.float() if params.temperature == 1.0 else logits.float() / params.temperature
    scaled = filter_logits(scaled, params.top_k, params.top_p)
    # float64 cumulative mass: the CDF's steps stay exact to the probabilities' own rounding, and a
    # filtered token (probability 0) is a zero-width step that no `u` lands on.
    cdf = torch.softmax(scaled, dim=-1).cumsum(dim=-1, dtype=torch.float64)
    target = row_uniforms(seeds, step).mul_(cdf[:, -1])
    token = torch.searchsorted(cdf, target[:, None], right=True)[:, 0]
    return token.clamp_(max=logits.shape[-1] - 1)


def eos_token_ids(tokenizer: Any, model: torch.nn.Module | None = None) -> list[int]:
    """The tokenizer's EOS plus any in the model's generation config."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None)
    if isinstance(extra, int):
        ids.add(extra)
    elif isinstance(extra, list | tuple):
        ids.update(int(e) for e in extra)
    if not ids:
        raise EngineError("the tokenizer has no EOS token: responses could never stop", code="invalid_model")
    return sorted(ids)
