"""Ulysses sequence parallelism (`ulysses_sequence_parallel_size`, VERL's name; DeepSpeed-Ulysses).

The workers of a job form groups of `sp` consecutive ranks; a group shares its rows (the
data-parallel group is `world / sp`: `dp_rank = rank // sp`) and splits every packed row's tokens:
rank `r` of a group holds tokens `[r * T/sp, (r + 1) * T/sp)` (the row padded to a multiple of `sp`
with a segment of its own). Everything per token (embeddings, MLPs, norms) then costs `1/sp`.

Attention needs whole sequences, so the `keel_ulysses` attention implementation (registered with
transformers' `AttentionInterface`, selected with `config._attn_implementation` like
`engine.packing`'s, so any Llama-style model works) turns `[T/sp tokens, all heads]` into
`[T tokens, heads/sp]` with an all-to-all, runs `engine.packing.varlen_attention` on full
sequences for its heads, and all-to-alls the output back. Position ids are sliced from the full
row's, so rotary embeddings see global positions; the sequence boundaries (`cu_seq_lens_*`) stay
the full row's.

After the backbone, its last hidden state (`tokens x hidden`, small) is all-gathered over the group,
so the scalar heads (values, scores) and every loss run unchanged on each rank of the group, with
identical results. The LM head is the exception: its `tokens x vocab` logits (and their log-softmax
and gradients) would be most of a step's memory, so `head_outputs` has each rank apply it to `1/sp`
of the wanted positions and compute the per-token outputs there (log-probs, entropy, NLL); those
small outputs are summed over the group (`reduce`), so every rank again holds all of them.
Gradients: each rank backpropagates `loss / sp` (`loss_scale`); `reduce`'s backward sums the
group's gradients (each rank's share gets the whole loss's), the gather's backward sums the group's
gradients and keeps this rank's slice, so the backbone's gradients on the group's ranks add up to the
full ones, and the data-parallel all-reduce (or FSDP2's reduce-scatter) over all `dp x sp` ranks sums
them. Statistics are counted by the group's rank 0 only (`counts`).
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from engine import packing
from engine.errors import ConfigError

IMPLEMENTATION = "keel_ulysses"
"""The attention implementation name registered with transformers."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """This worker's place: its sequence-parallel group (`size` ranks) and data-parallel group."""

    size: int = 1
    rank: int = 0
    """Rank inside the sequence-parallel group."""
    dp_rank: int = 0
    dp_size: int = 1
    group: Any = None
    """The torch.distributed group of the `size` ranks (None when `size` is 1)."""

    @property
    def counts(self) -> bool:
        """Whether this rank reports statistics (one rank per sequence-parallel group)."""
        return self.rank == 0

    @property
    def loss_scale(self) -> float:
        return 1.0 / self.size


def layout(sp: int, rank: int, world_size: int) -> Layout:
    """Split `world_size` ranks into groups of `sp` consecutive ranks. Every rank must call it (a new
    torch.distributed group is a collective); `sp == 1` creates nothing."""
    if sp < 1 or world_size % sp:
        raise ConfigError(f"ulysses_sequence_parallel_size {sp} must divide the {world_size} workers",
                          param="ulysses_sequence_parallel_size")
    if sp == 1:
        return Layout(dp_rank=rank, dp_size=world_size)
    mine = None
    for start in range(0, world_size, sp):
        group = dist.new_group(list(range(start, start + sp)))
        if start <= rank < start + sp:
            mine = group
    return Layout(size=sp, rank=rank % sp, dp_rank=rank // sp, dp_size=world_size // sp, group=mine)


def check_heads(config: Any, sp: int, param: str = "ulysses_sequence_parallel_size") -> None:
    """A model's attention heads (and key/value heads) must split evenly over `sp` ranks."""
    heads = getattr(config, "num_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None) or heads
    if sp > 1 and (heads is None or heads % sp or kv % sp):
        raise ConfigError(f"{param} {sp} must divide the model's attention heads ({heads}) and key/value "
                          f"heads ({kv})", param=param)


def shard_bounds(total: int, size: int, rank: int) -> tuple[int, int, int]:
    """`(start, stop, padded)`: the tokens of a `total`-token row that `rank` holds, and the row's
    length once padded to a multiple of `size`."""
    chunk = math.ceil(total / size)
    return rank * chunk, min((rank + 1) * chunk, total), chunk * size


# --- collectives with gradients -----------------------------------------------------------------------

def _all_to_all(x: torch.Tensor, scatter_dim: int, gather_dim: int, layout: Layout) -> torch.Tensor:
    """Split `x` into `size` chunks along `scatter_dim`, send chunk `j` to rank `j`, and concatenate
    what arrives along `gather_dim` in rank order."""
    send = torch.stack(x.chunk(layout.size, scatter_dim)).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=layout.group)
    return torch.cat(recv.unbind(0), dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scatter_dim: int, gather_dim: int, layout: Layout) -> torch.Tensor:
        ctx.dims, ctx.layout = (scatter_dim, gather_dim), layout
        return _all_to_all(x, scatter_dim, gather_dim, layout)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        scatter_dim, gather_dim = ctx.dims
        return _all_to_all(grad.contiguous(), gather_dim, scatter_dim, ctx.layout), None, None, None


class _Gather(torch.autograd.Function):
    """All-gather along dim 1 (tokens); backward: the group's gradients summed, this rank's slice."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, layout: Layout) -> torch.Tensor:
        ctx.layout = layout
        parts = [torch.empty_like(x) for _ in range(layout.size)]
        dist.all_gather(parts, x.contiguous(), group=layout.group)
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        layout = ctx.layout
        grad = grad.contiguous()
        dist.all_reduce(grad, group=layout.group)
        return grad.chunk(layout.size, dim=1)[layout.rank].contiguous(), None


class _Sum(torch.autograd.Function):
    """All-reduce (sum) over the group; backward: the same (every rank's loss reads the sum)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, layout: Layout) -> torch.Tensor:
        ctx.layout = layout
        out = x.contiguous().clone()
        dist.all_reduce(out, group=layout.group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.layout.group)
        return grad, None


def reduce(x: torch.Tensor, layout: Layout) -> torch.Tensor:
    """`x` summed over `layout`'s group, with gradients (a group of one: `x`)."""
    return x if layout.size == 1 else _Sum.apply(x, layout)


def gather_objects(obj: Any, layout: Layout) -> list[Any]:
    """Every rank's `obj` (picklable), in group rank order."""
    if layout.size == 1:
        return [obj]
    out: list[Any] = [None] * layout.size
    dist.all_gather_object(out, obj, group=layout.group)
    return out


# --- the attention implementation and the backbone hooks ----------------------------------------------

@dataclasses.dataclass
class _Shard:
    layout: Layout
    total: int
    position_ids: torch.Tensor
    """The full (padded) row's position ids."""


_ACTIVE: contextvars.ContextVar[_Shard | None] = contextvars.ContextVar("keel_ulysses", default=None)


def ulysses_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention function: `query` `(1, heads, T/sp, dim)` on each rank of the group
    -> `((1, T/sp, heads, dim), None)`; outside a sharded forward (generation), `varlen_attention`."""
    shard = _ACTIVE.get()
    if shard is None:
        return packing.varlen_attention(module, query, key, value, attention_mask, **kwargs)
    lay = shard.layout
    # [tokens/sp, heads] -> [tokens, heads/sp]: scatter heads (dim 1), gather tokens (dim 2).
    query, key, value = (_AllToAll.apply(x, 1, 2, lay) for x in (query, key, value))
    kwargs["position_ids"] = shard.position_ids
    out, _ = packing.varlen_attention(module, query, key, value, None, **kwargs)
    # out: (1, tokens, heads/sp, dim) -> (1, tokens/sp, heads, dim).
    return _AllToAll.apply(out, 1, 2, lay), None


def _pre_hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    lay: Layout | None = getattr(module, "_keel_ulysses", None)
    if lay is None or lay.size == 1 or "cu_seq_lens_q" not in kwargs or _ACTIVE.get() is not None:
        return None  # not a packed row (generation, a padded batch): this rank runs alone
    ids, positions, cu = kwargs["input_ids"], kwargs["position_ids"], kwargs["cu_seq_lens_q"]
    total = ids.shape[1]
    start, _, padded = shard_bounds(total, lay.size, lay.rank)
    if padded > total:  # the padding is a segment of its own: no real token attends to it
        extra = padded - total
        ids = torch.cat([ids, ids.new_zeros((1, extra))], dim=1)
        positions = torch.cat([positions, torch.arange(extra, device=positions.device)[None]], dim=1)
        cu = torch.cat([cu, cu.new_tensor([padded])])
    chunk = padded // lay.size
    kwargs = {**kwargs, "input_ids": ids[:, start:start + chunk], "position_ids": positions[:, start:start + chunk],
              "cu_seq_lens_q": cu, "cu_seq_lens_k": cu}
    module._keel_ulysses_token = _ACTIVE.set(_Shard(lay, total, positions))
    return args, kwargs


def _post_hook(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
    token = module.__dict__.pop("_keel_ulysses_token", None)
    if token is None:
        return None
    shard = _ACTIVE.get()
    _ACTIVE.reset(token)
    assert shard is not None
    output["last_hidden_state"] = _Gather.apply(output["last_hidden_state"], shard.layout)[:, :shard.total]
    return output


def _backbone(model: nn.Module) -> nn.Module:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(base, base.base_model_prefix)


def enable(model: nn.Module, lay: Layout, param: str = "ulysses_sequence_parallel_size") -> None:
    """Shard `model`'s packed forwards over `lay`'s group (a no-op for a group of one). The model
    must pack (`use_remove_padding`) and its heads must split evenly over the group."""
    if lay.size == 1:
        return
    if not packing.enabled(model):
        raise ConfigError(f"{param} > 1 needs model.use_remove_padding (packed rows)", param=param)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    check_heads(base.config, lay.size, param)
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    packing.register()
    AttentionInterface.register(IMPLEMENTATION, ulysses_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, packing.packed_mask)
    base.set_attn_implementation(IMPLEMENTATION)
    backbone = _backbone(model)
    backbone._keel_ulysses = lay
    backbone.register_forward_pre_hook(_pre_hook, with_kwargs=True)
    backbone.register_forward_hook(_post_hook, with_kwargs=True)


def layout_of(model: nn.Module) -> Layout:
    """The layout `enable` gave `model` (a group of one otherwise)."""
    return getattr(_backbone(model), "_keel_ulysses", None) or Layout()



def head_outputs(model: nn.Module, packed: packing.Packed, flat: torch.Tensor,
                 fn: Callable[[torch.Tensor, slice], Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    """Per-token outputs of the LM head at the packed row's tokens `flat` (1-D indices), every
    rank of the group computing `1/sp` of them: `fn(logits, part)` gets this rank's logits
    `(len(flat[part]), vocab)` and returns per-token tensors `(len(flat[part]),)`, floating point;
    each comes back `(len(flat),)`, summed over the group (zeros elsewhere), so every rank has all.

    Model types whose logits are not plain `lm_head(hidden)` (`engine.models.PLAIN_LM_HEADS`) run the
    whole head and slice: the same results, no saving."""
    from engine.models import PLAIN_LM_HEADS

    lay = layout_of(model)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings()
    n = flat.numel()
    start, stop, _ = shard_bounds(n, lay.size, lay.rank)
    start = min(start, n)  # few positions: the last ranks may have none
    stop = max(start, stop)
    mine = flat[start:stop]
    if getattr(base.config, "model_type", None) in PLAIN_LM_HEADS and head is not None:
        logits = head(_backbone(model)(**packed.model_inputs()).last_hidden_state[0, mine])
    else:
        logits = model(**packed.model_inputs()).logits[0, mine]
    outs = fn(logits, slice(start, stop))
    return [reduce(torch.nn.functional.pad(o, (start, n - stop)), lay) for o in outs]
