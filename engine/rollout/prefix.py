"""Response logits with each distinct prompt run once: the rows of a GRPO group (`rollout.n` samples
of one prompt) share their prompt, so its hidden states, keys and values are computed once and every
sample's response tokens attend to that one copy.

Why: the reference pass and the actor update score whole sequences, but with prompts of about 60
tokens and responses of about 30 most of a group's tokens are the same prompt repeated `n` times;
computing it once halves the tokens through the model at `n = 4`. Gradients are the same sums (a
prompt position's contribution from each sample adds up in its one copy), so log-probs, losses and
gradients equal the per-row forward's to float rounding.

Supported: on CPU, the models `engine.rollout.decode` runs (Llama, Qwen2, Mistral, plain or PEFT-wrapped, no
forward hooks, no sharded parameters), without gradient checkpointing (this forward keeps every
activation) and, in train mode, without dropout. Anything else goes through
`engine.models.logits_at`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from engine.rollout import decode


def left_padded_prompts(input_ids: torch.Tensor, prompt_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's prompt `input_ids[i, :prompt_lens[i]]`, left-padded to the longest.

    Args:
        input_ids: `(batch, seq)` right-padded prompt + response rows.
        prompt_lens: `(batch,)`.

    Returns:
        `(ids, mask)`, both `(batch, P)` with `P = max(prompt_lens)`; padding ids are 0.
    """
    width = max(1, int(prompt_lens.max()))
    src = torch.arange(width, device=input_ids.device)[None, :] - (width - prompt_lens[:, None])
    mask = src >= 0
    ids = input_ids.gather(1, src.clamp(min=0)) * mask
    return ids, mask.long()


def prompt_groups(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distinct rows of `(ids, mask)` `(batch, P)`: `(unique_ids, unique_mask, inverse)`, with
    `unique_*` `(groups, P)` and `inverse` `(batch,)` the group of each row."""
    width = ids.shape[1]
    unique, inverse = torch.unique(torch.cat([ids, mask], dim=1), dim=0, return_inverse=True)
    return unique[:, :width], unique[:, width:], inverse


def row_groups(input_ids: torch.Tensor, prompt_lens: torch.Tensor) -> list[list[int]]:
    """Indices of the rows `(batch, seq)` that share a prompt, each group in row order, groups in
    order of first appearance."""
    lens = prompt_lens.tolist()
    if len(set(lens)) == len(lens):  # no two prompts of the same length: nothing to compare
        return [[i] for i in range(len(lens))]
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (row, n) in enumerate(zip(input_ids[:, :max(lens)].tolist(), lens, strict=True)):
        groups.setdefault(tuple(row[:n]), []).append(i)
    return list(groups.values())


def supports(model: nn.Module) -> bool:
    """True when `response_logits` can run `model` (see the module docstring)."""
    # CPU only for now: on CUDA, packed rows run torch's flash varlen kernel, and this path's masked
    # SDPA has not been measured against it there.
    if next(model.parameters()).device.type != "cpu":
        return False
    for module in model.modules():
        # What transformers' `is_activation_checkpointing` reads (its older name warns).
        if getattr(module, "gradient_checkpointing", False) is True:
            return False
        # Training with dropout: a shared prompt would share its dropout masks (and this forward
        # applies no attention dropout). Keel's trained policies have none (`disable_dropout`).
        if model.training and any("dropout" in k and isinstance(v, float) and v > 0 for k, v in vars(module).items()):
            return False
        if model.training and isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
            return False
    return decode.supports(model)


def response_logits(model: nn.Module, input_ids: torch.Tensor, prompt_lens: torch.Tensor,
                    responses: torch.Tensor, groups: list[list[int]] | None = None) -> torch.Tensor:
    """Logits scoring each response token, each distinct prompt computed once.

    Equals `engine.models.logits_at(model, input_ids, attention_mask, response_positions(...))` on
    every real response token, to float rounding (autograd flows through both parts).

    Args:
        input_ids: `(batch, seq)` right-padded prompt + response rows (only the prompts are read).
        prompt_lens: `(batch,)` real prompt tokens per row (each >= 1).
        responses: `(batch, R)` response tokens, right-padded.
        groups: `row_groups(input_ids, prompt_lens)` when the caller has it already.

    Returns:
        `(batch, R, vocab)`: position `j` holds the logits that predict response token `j`.
    """
    dec = decode.Decoder(model)
    ids, mask = left_padded_prompts(input_ids, prompt_lens)
    groups = groups or row_groups(input_ids, prompt_lens)
    n = len(groups[0])
    if all(g == list(range(k * n, (k + 1) * n)) for k, g in enumerate(groups)):
        # Groups of n adjacent rows (`iter_micro_batches` keeps them so): a broadcast copies each
        # prompt's tensors to its rows, and its backward is a sum instead of a scatter.
        first_rows = torch.tensor([g[0] for g in groups], device=ids.device)
        unique_ids, unique_mask = ids[first_rows], mask[first_rows]

        def expand(t: torch.Tensor) -> torch.Tensor:
            return t[:, None].expand(t.shape[0], n, *t.shape[1:]).reshape(-1, *t.shape[1:])
    else:
        unique_ids, unique_mask, inverse = prompt_groups(ids, mask)

        def expand(t: torch.Tensor) -> torch.Tensor:
            return t.index_select(0, inverse)
    # The prompts run once; `last` is the pre-norm hidden state of each prompt's last token.
    last, prompt_kv = dec.prefill_hidden(unique_ids, unique_mask)
    first = expand(last)[:, None]  # (batch, 1, hidden): scores response token 0
    width = responses.shape[1] - 1  # response tokens fed in: the last one's output predicts nothing
    if width == 0:
        hidden = first
    else:
        hidden = torch.cat([first, _responses(dec, responses[:, :width], prompt_lens, expand(unique_mask.bool()),
                                              expand, prompt_kv)], dim=1)
    return dec.lm_head(decode.rms_norm(hidden, dec.norm, dec.norm_eps))


def _responses(dec: decode.Decoder, tokens: torch.Tensor, prompt_lens: torch.Tensor, prompt_mask: torch.Tensor,
               expand: Callable[[torch.Tensor], torch.Tensor],
               prompt_kv: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """The decoder over `(batch, r)` response tokens attending to their group's prompt keys and values
    (`expand` maps a per-group tensor to rows; `prompt_mask` `(batch, P)` bool, left-padded) and
    causally to each other; returns the last layer's hidden states `(batch, r, hidden)`."""
    batch, width = tokens.shape
    x = dec.embed_ids(tokens)
    cos, sin = dec.rotary(prompt_lens[:, None] + torch.arange(width, device=tokens.device), x.dtype)
    cos, sin = cos[:, None], sin[:, None]  # (batch, 1, r, hd)
    # Additive mask (batch, 1, r, P + r): the group's real prompt tokens, then causal over responses.
    prompt_ok = prompt_mask[:, None, :].expand(batch, width, -1)
    causal = torch.ones(width, width, dtype=torch.bool, device=tokens.device).tril()
    allowed = torch.cat([prompt_ok, causal.expand(batch, -1, -1)], dim=2)
    mask = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill_(~allowed, float("-inf"))[:, None]
    for layer, (pk, pv) in zip(dec.layers, prompt_kv, strict=True):
        x, _, _ = dec.layer_forward(layer, x, cos, sin, mask, past=(expand(pk), expand(pv)))
    return x
