"""Saving a trained head for use outside Keel: a Hugging Face directory in safetensors (a LoRA model
merged, with its adapter beside it), written in the job's compute dtype.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from engine.models.forward import is_lora


def save_model(model: nn.Module, tokenizer: Any, out_dir: str | os.PathLike,
               dtype: torch.dtype | None = None) -> Literal["hf", "lora"]:
    """Save for use outside Keel, safetensors only.

    A plain model is saved with `save_pretrained` ("hf"). A PEFT model writes the merged full model
    at `out_dir` (loadable with plain `from_pretrained`) and the adapter alone under
    `out_dir/adapter/` (loadable with `PeftModel.from_pretrained`), and returns "lora". The model
    being trained is left untouched (merging happens on a copy).

    `dtype` (the job's compute dtype) is the dtype of the saved full weights: float32 masters are
    written as bf16/fp16, as large as the model the job started from. The adapter stays float32.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kind: Literal["hf", "lora"] = "hf"
    full = model
    if is_lora(model):
        model.save_pretrained(out / "adapter", safe_serialization=True)
        # merge_and_unload mutates its model, and unmerging in bf16 does not restore the weights
        # exactly: merge a copy. It costs one model's memory for the duration of the save.
        full = copy.deepcopy(model).merge_and_unload()
        if dtype is not None:
            full.to(dtype)  # a copy: the float32 adapter / score head merged into the compute dtype
        kind = "lora"
    state_dict = None
    if dtype is not None and kind == "hf" and any(p.dtype != dtype for p in full.parameters()):
        state_dict = _cast_state_dict(full, dtype)
    # Training turns the KV cache off (gradient checkpointing); the saved model is for inference.
    use_cache = getattr(full.config, "use_cache", None)
    full.config.use_cache = True
    try:
        full.save_pretrained(out, state_dict=state_dict)
        if state_dict is not None:  # save_pretrained records the parameters' dtype, not the file's
            saved_dtype = full.config.dtype
            full.config.dtype = str(dtype).removeprefix("torch.")
            try:
                full.config.save_pretrained(out)
            finally:
                full.config.dtype = saved_dtype
    finally:
        full.config.use_cache = use_cache
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return kind


def _cast_state_dict(model: nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """`model.state_dict()` with floating tensors cast to `dtype`; tied tensors stay one tensor."""
    cast: dict[tuple[Any, ...], torch.Tensor] = {}
    out = {}
    for name, value in model.state_dict().items():
        if not value.is_floating_point():
            out[name] = value
            continue
        key = (value.data_ptr(), value.storage_offset(), tuple(value.shape), tuple(value.stride()))
        if key not in cast:
            cast[key] = value.detach().to(dtype)
        out[name] = cast[key]
    return out
