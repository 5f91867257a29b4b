"""Sequence packing (`model.use_remove_padding`): a micro-batch's sequences run as one row, no padding.

The sequences are laid end to end in a single `(1, total_tokens)` row. Each gets position ids that
restart at 0 (so rotary embeddings see exactly the positions an unpadded row would) and the
boundaries travel as `cu_seq_lens_q`/`cu_seq_lens_k` (cumulative lengths, flash-attention's
`cu_seqlens`) through transformers' attention kwargs. Attention is causal inside each sequence and
block-diagonal across them: no token attends to another sequence.

The attention itself is the `keel_varlen` implementation registered here with transformers'
`AttentionInterface` and selected on the model by `enable`:

- with the packing kwargs, it runs each sequence's causal attention separately, so the work is
  about `sum(len_i^2)` and not `total^2` (on CUDA in half precision: one call to torch's
  flash-attention `varlen_attn` kernel; elsewhere batched SDPA calls over length buckets,
  `bucket_plan`, where that saves more calls than its copies cost, else SDPA per sequence; both
  match a padded SDPA forward to float rounding);
- without them (generation with a KV cache, any padded call), it is plain SDPA with SDPA's masks,
  so one model serves both.

`Packed` maps the packed row's per-token outputs back to `(batch, ...)`: the last token of each
sequence (reward scores), chosen positions of each sequence (response log-probs), or a padded
`(batch, seq)` layout (critic values).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

IMPLEMENTATION = "keel_varlen"
"""The attention implementation name registered with transformers."""
PACKED_IMPLEMENTATIONS = frozenset({IMPLEMENTATION, "keel_ulysses"})
"""Implementations that run packed rows (`engine.runtime.ulysses` shards them over several workers)."""


# --- packing and unpacking ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Packed:
    """A micro-batch packed into one row, and the maps back to per-sequence form.

    Attributes:
        input_ids, position_ids: `(1, total)`; positions restart at 0 for every sequence.
        cu_seqlens: `(n + 1,)` int32 cumulative lengths: sequence `i` is `[cu[i], cu[i + 1])`.
        lengths: the `n` sequence lengths (all positive).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    lengths: tuple[int, ...]

    @property
    def total(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def starts(self) -> torch.Tensor:
        return self.cu_seqlens[:-1].long()

    def model_inputs(self) -> dict[str, Any]:
        """Keyword arguments for a transformers forward: no attention mask (the boundaries are in
        the kwargs), no KV cache."""
        longest = max(self.lengths)
        return {"input_ids": self.input_ids, "position_ids": self.position_ids, "use_cache": False,
                "cu_seq_lens_q": self.cu_seqlens, "cu_seq_lens_k": self.cu_seqlens,
                "max_length_q": longest, "max_length_k": longest}

    def to(self, device: torch.device | str) -> Packed:
        return dataclasses.replace(self, input_ids=self.input_ids.to(device),
                                   position_ids=self.position_ids.to(device),
                                   cu_seqlens=self.cu_seqlens.to(device))

    def last(self, x: torch.Tensor) -> torch.Tensor:
        """`(1, total, ...)` -> `(n, ...)`: each sequence's last token."""
        return x[0, self.cu_seqlens[1:].long() - 1]

    def at(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """`(1, total, ...)` -> `(n, k, ...)`: position `positions[i, j]` of sequence `i`, clamped
        into the sequence (as a padded gather clamps into the row; beyond the end lies padding)."""
        lengths = torch.as_tensor(self.lengths, device=positions.device)
        inside = torch.minimum(positions.clamp(min=0), (lengths - 1)[:, None])
        return x[0, self.starts.to(positions.device)[:, None] + inside]

    def to_padded(self, x: torch.Tensor, width: int | None = None) -> torch.Tensor:
        """`(1, total, ...)` -> `(n, width, ...)`, right-padded with zeros (width: the longest)."""
        width = width or max(self.lengths)
        out = x.new_zeros((len(self.lengths), width, *x.shape[2:]))
        rows, cols = self.padded_index(x.device)
        return out.index_put((rows, cols), x[0])

    def padded_index(self, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, column) in a right-padded `(n, width)` layout of every packed token, in order."""
        lengths = torch.as_tensor(self.lengths, device=device)
        rows = torch.repeat_interleave(torch.arange(len(self.lengths), device=device), lengths)
        cols = torch.arange(self.total, device=device) - self.starts.to(device)[rows]
        return rows, cols


def pack(seqs: Sequence[Sequence[int]]) -> Packed:
    """Lay token id lists end to end (each must be non-empty)."""
    if not seqs or any(len(s) == 0 for s in seqs):
        raise ValueError("pack needs at least one sequence and no empty ones")
    lengths = tuple(len(s) for s in seqs)
    ids = torch.tensor([t for s in seqs for t in s], dtype=torch.long)[None]
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths), 0)
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    return Packed(ids, positions, cu, lengths)


def pack_padded(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Packed:
    """Pack a right-padded `(batch, seq)` batch (each row's real tokens come first), on its device."""
    lengths_t = attention_mask.sum(-1)
    lengths = tuple(int(n) for n in lengths_t.tolist())
    if any(n == 0 for n in lengths):
        raise ValueError("pack_padded needs every row to hold at least one token")
    keep = attention_mask.bool()
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32, device=input_ids.device)
    cu[1:] = torch.cumsum(lengths_t, 0)
    cols = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    return Packed(input_ids[keep][None], cols[keep][None], cu, lengths)


def budget_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Group indices so that each group's *total* length is <= `max_tokens` (a packed row has no
    padding, so the budget counts real tokens). First-fit decreasing: longest first, each into the
    first group with room, so few forwards are needed; a sequence over the budget is alone.

    Returns:
        Lists of indices into `lengths`, each longest first; every index appears exactly once.
    """
    if max_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    groups: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        slot = next((g for g, r in enumerate(room) if r >= lengths[i]), None)
        if slot is None:
            groups.append([i])
            room.append(max_tokens - lengths[i])
        else:
            groups[slot].append(i)
            room[slot] -= lengths[i]
    return groups


# --- the attention implementation --------------------------------------------------------------------

def _segments(cu_seqlens: torch.Tensor | None, position_ids: torch.Tensor | None,
              total: int) -> list[int] | None:
    """Sequence boundaries of a packed row: from `cu_seqlens`, else where `position_ids` restart
    (a caller that packed by position ids alone, as transformers allows); None for a plain row."""
    if cu_seqlens is not None:
        return [int(c) for c in cu_seqlens.tolist()]
    if position_ids is None or position_ids.shape[0] != 1:
        return None
    restarts = torch.nonzero(position_ids[0, 1:] <= position_ids[0, :-1]).flatten() + 1
    if restarts.numel() == 0:
        return None
    return [0, *restarts.tolist(), total]


def varlen_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention function: `query` `(1, heads, total, dim)`, `key`/`value`
    `(1, kv_heads, total, dim)` -> `((1, total, heads, dim), None)`."""
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    bounds = None
    if attention_mask is None and query.shape[0] == 1 and query.shape[2] == key.shape[2] > 1:
        bounds = _segments(kwargs.get("cu_seq_lens_q"), kwargs.get("position_ids"), query.shape[2])
    if bounds is None:
        kwargs.pop("cu_seq_lens_q", None), kwargs.pop("cu_seq_lens_k", None)
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    groups = getattr(module, "num_key_value_groups", 1)
    if query.is_cuda and query.dtype in (torch.float16, torch.bfloat16) and not dropout:
        return _flash_varlen(query, key, value, kwargs, bounds, scaling, groups), None
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    layout = _bucket_layout(tuple(bounds), query.shape[1] * query.shape[3], query.device)
    if layout is None:
        return _per_sequence_attention(query, key, value, bounds, dropout, scaling), None
    return _bucketed_attention(query, key, value, layout, dropout, scaling), None


def _per_sequence_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bounds: Sequence[int],
                            dropout: float, scaling: float | None) -> torch.Tensor:
    """One causal SDPA per sequence: `(1, heads, total, dim)` -> `(1, total, heads, dim)`."""
    # `split`, not slicing: the backward of n slices would zero-fill n full-size gradients.
    lengths = [e - s for s, e in itertools.pairwise(bounds)]
    parts = [torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True,
                                                              scale=scaling)
             for q, k, v in zip(query.split(lengths, 2), key.split(lengths, 2), value.split(lengths, 2))]
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    return out.transpose(1, 2).contiguous()


BUCKET_WASTE = 1.3
"""A bucket may do at most `BUCKET_WASTE` x its sequences' own attention work (`n x longest^2`
against `sum(len_i^2)`), so a long tail is never padded to its longest member."""

CALL_COST = 200_000
"""The fixed cost of one more SDPA call (forward and backward, per op and per OpenMP fork), in
attention work units (`len^2 x heads x head_dim`): about 35 us at 2 threads on this project's CPUs,
the work of a 40-token sequence at 4 x 32 channels. A sequence joins a bucket only when padding it
to the bucket's width costs less than the call it saves: tiny sequences share buckets, long ones
(and any on a wide model, where the work dominates) keep their own call."""


ROW_COST = 20
"""What batching adds per element of the row (`total x heads x head_dim`), in the same units as
`CALL_COST`: the gathers into buckets, the scatter back and their backward, all full-row copies.
Measured on the demo Llama (hidden 128): 32 demo sequences (35..50 tokens, 2 buckets) attend in
about 25% less time batched; 32 long-tail ones (36..308 tokens, 16 buckets) about 20% more."""


def use_buckets(lengths: Sequence[int], buckets: Sequence[Sequence[int]], channels: int) -> bool:
    """Whether batching into `buckets` pays: the calls it saves cost more than the copies it adds."""
    return (len(lengths) - len(buckets)) * CALL_COST > ROW_COST * sum(lengths) * channels


def bucket_plan(lengths: Sequence[int], channels: int = 128, waste: float = BUCKET_WASTE,
                call_cost: float = CALL_COST) -> list[list[int]]:
    """Group sequences into length buckets for batched attention (`channels`: heads x head_dim).
    Longest first; a bucket of width `w` takes the next sequence (length `n`) while its padding work
    `(w^2 - n^2) x channels` is under `call_cost` and the bucket's padded work stays within `waste`
    x its real work.

    Returns:
        Lists of indices into `lengths`, each longest first (its first member is its width);
        every index appears exactly once.
    """
    buckets: list[list[int]] = []
    real = 0
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        n = lengths[i]
        width = lengths[buckets[-1][0]] if buckets else 0
        if (buckets and (width * width - n * n) * channels <= call_cost
                and (len(buckets[-1]) + 1) * width * width <= waste * (real + n * n)):
            buckets[-1].append(i)
            real += n * n
        else:
            buckets.append([i])
            real = n * n
    return buckets


@functools.lru_cache(maxsize=8)
def _bucket_layout(bounds: tuple[int, ...], channels: int, device: torch.device
                   ) -> tuple[torch.Tensor, torch.Tensor, tuple[tuple[int, int], ...]] | None:
    """(gather, place, shapes) for `_bucketed_attention`: `gather[j]` is the packed token at slot `j`
    of the buckets laid out one after another, each `(members, width)` row-major and right-padded;
    `place[t]` is the slot of packed token `t`. Cached: every layer of a forward (and the next
    forward over the same boundaries) reuses it. None where batching does not pay (`use_buckets`)."""
    lengths = [e - s for s, e in itertools.pairwise(bounds)]
    buckets = bucket_plan(lengths, channels)
    if not use_buckets(lengths, buckets, channels):
        return None
    gather: list[int] = []
    place = [0] * bounds[-1]
    shapes = []
    for bucket in buckets:
        width = lengths[bucket[0]]
        for i in bucket:
            start, n = bounds[i], lengths[i]
            place[start:start + n] = range(len(gather), len(gather) + n)
            # Padding slots repeat the sequence's first token: any finite value works, since with
            # right padding and a causal mask only padding queries (dropped) ever see them.
            gather.extend(range(start, start + n))
            gather.extend([start] * (width - n))
        shapes.append((len(bucket), width))
    return (torch.tensor(gather, dtype=torch.long, device=device),
            torch.tensor(place, dtype=torch.long, device=device), tuple(shapes))


def _bucketed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        layout: tuple[torch.Tensor, torch.Tensor, tuple[tuple[int, int], ...]],
                        dropout: float, scaling: float | None) -> torch.Tensor:
    """Causal attention inside each sequence of a packed row, as one batched SDPA per length bucket.

    `query`, `key`, `value`: `(1, heads, total, dim)` (key/value already repeated to `heads`) ->
    `(1, total, heads, dim)`. Each bucket is a right-padded `(members, heads, width, dim)` batch
    gathered from the row; a real query attends causally to its own sequence only (padding lies
    after it), and the padding rows' outputs are not gathered back, so their gradient is zero.
    """
    gather, place, shapes = layout
    # Token-major `(total, heads, dim)` views (`squeeze`, not `[0]`: a select's backward zero-fills and
    # copies the whole gradient), then one gather each into the buckets' padded layout.
    q, k, v = (x.squeeze(0).transpose(0, 1).index_select(0, gather) for x in (query, key, value))
    sizes = [n * w for n, w in shapes]
    outs = []
    for (n, w), qb, kb, vb in zip(shapes, q.split(sizes), k.split(sizes), v.split(sizes)):
        qb, kb, vb = (t.view(n, w, *t.shape[1:]).transpose(1, 2) for t in (qb, kb, vb))
        o = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, dropout_p=dropout, is_causal=True,
                                                             scale=scaling)
        outs.append(o.transpose(1, 2).reshape(n * w, o.shape[1], o.shape[3]))
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out.index_select(0, place)[None]


def _flash_varlen(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kwargs: dict, bounds: list[int],
                  scaling: float | None, groups: int) -> torch.Tensor:
    """One flash-attention varlen kernel call over all sequences (torch's own, no extra package)."""
    from torch.nn.attention.varlen import varlen_attn

    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        cu = torch.tensor(bounds, dtype=torch.int32, device=query.device)
    longest = max(e - s for s, e in itertools.pairwise(bounds))
    out = varlen_attn(query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1),
                      cu.to(torch.int32), cu.to(torch.int32), longest, longest, window_size=(-1, 0),  # causal
                      scale=scaling, enable_gqa=groups > 1)
    return out[None]


def packed_mask(batch_size: int, q_length: int, kv_length: int, q_offset: Any = 0, kv_offset: Any = 0,
          attention_mask: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor | None:
    """transformers mask function: SDPA's, except that a single row without a padding mask and
    without a cache gets none (a packed row's block-diagonal `total x total` mask would cost
    `total^2` memory; `varlen_attention` knows the boundaries, and a lone row is plain causal)."""
    from transformers.masking_utils import sdpa_mask

    if (attention_mask is None and batch_size == 1 and q_length == kv_length
            and isinstance(q_offset, int) and isinstance(kv_offset, int) and q_offset == kv_offset == 0):
        return None
    return sdpa_mask(batch_size, q_length, kv_length, q_offset, kv_offset, attention_mask=attention_mask, **kwargs)


def register() -> None:
    """Make `keel_varlen` known to transformers in this process (on first use: importing this
    module must not import transformers)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(IMPLEMENTATION, varlen_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, packed_mask)


# --- models ------------------------------------------------------------------------------------------

def enable(model: nn.Module) -> bool:
    """Switch a (not yet PEFT-wrapped) transformers model to `keel_varlen` attention; returns whether
    it could (models that do not route attention through transformers' interface keep padding)."""
    if not getattr(model, "_supports_attention_backend", False):
        return False
    if uses_sliding_window(model.config):
        from engine.errors import ConfigError

        raise ConfigError(f"packed attention has no sliding window, which this {model.config.model_type} model "
                          "uses: set model.use_remove_padding to false", param="model.use_remove_padding")
    register()
    model.set_attn_implementation(IMPLEMENTATION)
    return True


def uses_sliding_window(config: Any) -> bool:
    """Whether some layer attends within a sliding window (Mistral; Qwen2 with `use_sliding_window`):
    packed attention is causal over the whole sequence, so it would attend past the window."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return "sliding_attention" in layer_types
    return getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True)


def enabled(model: nn.Module) -> bool:
    """True when `model` (possibly PEFT-wrapped) runs packed forwards."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    return getattr(config, "_attn_implementation", None) in PACKED_IMPLEMENTATIONS
