"""The forwards Keel runs on a loaded head: a reward model's score at the last attended token, a value
model's per-token values, a policy's logits at chosen positions only, and the reference policy as the
LoRA actor with its adapter disabled (`reference_mode`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from engine import packing


def is_lora(model: nn.Module) -> bool:
    """True when `model` is PEFT-wrapped (so `reference_mode` works and `save_model` gives "lora")."""
    from peft import PeftModel

    return isinstance(model, PeftModel)


def _seq_cls_parts(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """(backbone, score head) of a possibly PEFT-wrapped sequence-classification model; the LoRA
    layers live inside the backbone, so calling it applies the adapter."""
    base = model.get_base_model() if is_lora(model) else model
    return getattr(base, base.base_model_prefix), base.score


def _last_attended(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last 1 in each row of `attention_mask` (batch, seq) -> (batch,); right or left
    padding alike."""
    positions = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    return (positions * attention_mask.ne(0)).argmax(-1)


def score_positions(input_ids: torch.Tensor, attention_mask: torch.Tensor, pad_token_id: int | None) -> torch.Tensor:
    """Where Hugging Face's `*ForSequenceClassification` reads the score, so an exported reward model
    scores the same outside Keel: the rightmost token that is not `pad_token_id` (with pad == eos, the
    token before a trailing eos), or the last attended token when the model has no pad id.

    Args:
        input_ids, attention_mask: `(batch, seq)`, right-padded.

    Returns:
        `(batch,)` long.
    """
    if pad_token_id is None:
        return _last_attended(attention_mask)
    positions = torch.arange(input_ids.shape[-1], device=input_ids.device)
    return (positions * input_ids.ne(pad_token_id)).argmax(-1)


def reward_scores(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Scalar reward per sequence, read where Hugging Face reads it (`score_positions`).

    Args:
        input_ids, attention_mask: `(batch, seq)`.

    Returns:
        `(batch,)` float32.
    """
    backbone, score = _seq_cls_parts(model)
    read = score_positions(input_ids, attention_mask, getattr(model.config, "pad_token_id", None))
    if packing.enabled(backbone):  # one row, no padding; the score head sees the read tokens only
        packed = packing.pack_padded(input_ids, attention_mask)
        inside = read - attention_mask.ne(0).int().argmax(-1)  # from the row's first real token
        hidden = packed.at(backbone(**packed.model_inputs()).last_hidden_state, inside[:, None])[:, 0]
        return score(hidden).squeeze(-1).float()
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    # Score only the pooled hidden state: (batch, hidden) instead of (batch, seq, hidden).
    return score(hidden[rows, read]).squeeze(-1).float()


def token_values(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Scalar value per token (the critic).

    Args:
        input_ids, attention_mask: `(batch, seq)`.

    Returns:
        `(batch, seq)` float32; positions where `attention_mask` is 0 hold arbitrary values.
    """
    backbone, score = _seq_cls_parts(model)
    if packing.enabled(backbone):
        packed = packing.pack_padded(input_ids, attention_mask)
        values = score(backbone(**packed.model_inputs()).last_hidden_state).squeeze(-1).float()
        return packed.to_padded(values, input_ids.shape[1])
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return score(hidden).squeeze(-1).float()


PLAIN_LM_HEADS = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
"""Model types whose logits are exactly `lm_head(last_hidden_state)` (no soft-capping or scaling),
so the head can be applied to a slice of the hidden states."""


def logits_at(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              positions: torch.Tensor) -> torch.Tensor:
    """Causal-LM logits at `positions` only.

    The backbone runs once; the LM head sees the `(batch, k, hidden)` hidden states it is asked
    for, not `(batch, seq, hidden)`: with long prompts and a large vocabulary, the prompt
    positions' logits are most of a forward's memory. Other model types run the whole forward and
    gather (same result, no saving).

    Args:
        input_ids, attention_mask: `(batch, seq)`.
        positions: `(batch, k)` indices into `seq`.

    Returns:
        `(batch, k, vocab)` in the head's output dtype.
    """
    base = model.get_base_model() if is_lora(model) else model
    head = base.get_output_embeddings()
    plain = getattr(base.config, "model_type", None) in PLAIN_LM_HEADS and head is not None
    if packing.enabled(base):  # one row without padding (`engine.packing`)
        packed = packing.pack_padded(input_ids, attention_mask)
        if not plain:
            return packed.at(model(**packed.model_inputs()).logits, positions)
        hidden = getattr(base, base.base_model_prefix)(**packed.model_inputs()).last_hidden_state
        return head(packed.at(hidden, positions))
    if not plain:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits.gather(1, positions[..., None].expand(-1, -1, logits.shape[-1]))
    backbone = getattr(base, base.base_model_prefix)  # LoRA layers live inside it: adapters apply
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    return head(hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1])))


@contextlib.contextmanager
def reference_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Run the reference policy: the PEFT actor with its adapter disabled (no second weight copy).

    Raises:
        TypeError: for a plain model; the caller loads a frozen copy with `trainable=False` instead.
    """
    if not is_lora(model):
        raise TypeError("reference_mode needs a PEFT (LoRA) model; load a frozen reference copy instead")
    with model.disable_adapter():
        yield model
