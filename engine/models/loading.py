"""Loading the three heads Keel trains (policy, reward model, value model): where a model may come
from, its tokenizer and size, the LoRA rank, and the heads themselves (with gradient checkpointing,
packing and LoRA applied), plus LoRA views that share one frozen base.

Weights are read as safetensors only (`use_safetensors=True`): nothing a user uploads is ever
unpickled.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import struct
from collections.abc import Sequence
from math import prod
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engine import packing
from engine.config import ModelConfig
from engine.errors import ConfigError, ModelNotAllowed
from engine.runtime.precision import COMPUTE_DTYPES

DTYPES = COMPUTE_DTYPES
MODEL_MARKERS = ("config.json", "adapter_config.json")
"""A directory is a model when it holds one of these."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
"""`org/name` as the hub spells it; no `..`, no leading dot or slash, exactly one separator."""


# --- where a model may come from --------------------------------------------------------------------

def resolve_model_path(name: str, allowed_roots: Sequence[str]) -> str:
    """Turn a user-supplied model name into something safe to pass to `from_pretrained`.

    Accepted, in order:
    1. a directory (absolute, or relative to one of `allowed_roots`) whose real path, symlinks
       resolved, lies under a real allowed root and holds `config.json` or `adapter_config.json`;
       an adapter directory's `base_model_name_or_path` must itself pass these rules (else
       `from_pretrained` would follow it anywhere);
    2. a hub id `org/name` that is not also an existing local path (`from_pretrained` would
       silently load that local directory instead);
    anything else raises `ModelNotAllowed`.

    Returns:
        The resolved absolute directory, or the hub id unchanged.
    """
    return _resolve(name, allowed_roots, depth=0)


def _resolve(name: str, allowed_roots: Sequence[str], depth: int) -> str:
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ModelNotAllowed("model name must be a non-empty string", param="model")
    roots = [os.path.realpath(r) for r in allowed_roots]
    candidates = [name] if os.path.isabs(name) else [os.path.join(r, name) for r in roots]
    for candidate in candidates:
        real = os.path.realpath(candidate)
        root = next((r for r in roots if real == r or real.startswith(r.rstrip(os.sep) + os.sep)), None)
        if root is None or not os.path.isdir(real):
            continue
        if not any(os.path.isfile(os.path.join(real, m)) for m in MODEL_MARKERS):
            raise ModelNotAllowed(f"{name!r} is not a model directory (no config.json)", param="model")
        if os.path.isfile(os.path.join(real, "adapter_config.json")):
            if depth > 0:
                raise ModelNotAllowed(f"adapter {name!r} is based on another adapter", param="model")
            _resolve(adapter_base(real), allowed_roots, depth + 1)
        return real
    if _HUB_ID.match(name) and not os.path.exists(name):
        return name
    raise ModelNotAllowed(
        f"model {name!r} is neither a model directory under the allowed roots nor a hub id",
        param="model")


def adapter_base(adapter_dir: str) -> str:
    """`base_model_name_or_path` of a PEFT adapter directory."""
    try:
        with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
            base = json.load(f).get("base_model_name_or_path")
    except (OSError, ValueError) as e:
        raise ModelNotAllowed(f"unreadable adapter_config.json in {adapter_dir!r}", param="model") from e
    if not isinstance(base, str) or not base:
        raise ModelNotAllowed(f"adapter {adapter_dir!r} names no base model", param="model")
    return base


# --- tokenizer and sizes -----------------------------------------------------------------------------

def load_tokenizer(path: str):
    """The tokenizer at `path`, with a pad token guaranteed and `padding_side="right"`.

    A tokenizer without a pad token reuses `unk`, else `eos`; no token is added, so the embedding
    matrix keeps its size. (With pad == eos, Hugging Face's sequence-classification pooling skips a
    trailing EOS while `reward_scores` does not: give such models a distinct pad token.)
    """
    from transformers import AutoTokenizer

    if (os.path.isfile(os.path.join(path, "adapter_config.json"))
            and not os.path.isfile(os.path.join(path, "tokenizer_config.json"))):
        path = adapter_base(path)  # a bare adapter uses its base model's tokenizer
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.unk_token if tokenizer.unk_token is not None else tokenizer.eos_token
    if tokenizer.pad_token is None:
        raise ModelNotAllowed(f"tokenizer at {path!r} has no pad, unk or eos token", param="model")
    tokenizer.padding_side = "right"
    return tokenizer


def count_parameters(path_or_model: str | nn.Module) -> int:
    """Parameter count of a loaded model, or of a model directory / hub id without loading weights.

    A local directory is counted from its safetensors headers (a few KB read); otherwise the model
    is built on the meta device from its config.
    """
    if isinstance(path_or_model, nn.Module):
        return sum(p.numel() for p in path_or_model.parameters())
    path = Path(path_or_model)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    files = [f for f in files if not f.name.startswith("adapter_")]
    if files:
        return sum(_safetensors_numel(f) for f in files)
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(path_or_model), trust_remote_code=False)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def _safetensors_numel(file: Path) -> int:
    """Sum of tensor sizes from a safetensors header: 8-byte little-endian length, then JSON."""
    with open(file, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return sum(prod(v["shape"]) for k, v in header.items() if k != "__metadata__")


def resolve_lora_rank(rank: int | str, n_params: int) -> int:
    """`auto` picks by size as the recipe says (< 1B: 32, < 10B: 64, else 128); an int is kept."""
    if rank == "auto":
        return 32 if n_params < 1_000_000_000 else 64 if n_params < 10_000_000_000 else 128
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ConfigError(f"lora_rank must be a non-negative int or 'auto', got {rank!r}", param="model.lora_rank")
    return rank


# --- loading the three heads -------------------------------------------------------------------------

def load_policy(path: str, cfg: ModelConfig, *, trainable: bool = True,
                allowed_roots: Sequence[str] | None = None) -> nn.Module:
    """A causal LM, PEFT-wrapped when `cfg.lora_rank` is set (continuing from
    `cfg.lora_adapter_path` when given).

    Args:
        path: a directory or hub id, already checked with `resolve_model_path` unless
            `allowed_roots` is given, in which case `path` and `cfg.lora_adapter_path` are checked here.
        trainable: False gives a frozen model in eval mode (a reference copy, a teacher).
    """
    from transformers import AutoModelForCausalLM

    path, adapter = _checked_paths(path, cfg, allowed_roots)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=_load_dtype(cfg, adapter, trainable),
                                                 use_safetensors=True)
    return _finish(model, cfg, adapter, trainable, task_type="CAUSAL_LM")


def load_reference(path: str, cfg: ModelConfig) -> nn.Module:
    """The frozen reference of a policy trained from `path` with `cfg`: that policy as training
    starts (an adapter given as the model or as `lora_adapter_path` stays applied; a fresh LoRA adds
    nothing before its first update and is left out), with its weights in the dtype the trained
    policy holds them (float32 masters for a full fine-tune, the compute dtype under a LoRA base).

    Why not the compute dtype: autocast runs norms, embeddings and the softmax in float32 on the
    policy's float32 masters, and a bf16 copy run the same way drifts from it (about 4e-3 per token
    on the demo model), so KL and DPO's margins would not start at exactly 0. Run the reference under
    the policy's autocast. The price is a float32 copy of the weights for a full fine-tune.
    """
    from transformers import AutoModelForCausalLM

    path, adapter = _checked_paths(path, cfg, None)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=_load_dtype(cfg, adapter, True), use_safetensors=True)
    frozen = dataclasses.replace(cfg, lora_rank=0, enable_gradient_checkpointing=False)
    model = _finish(model, frozen, adapter, False, task_type="CAUSAL_LM")
    with torch.no_grad():  # an adapter as the trained policy holds it (`_finish`: float32)
        for name, p in model.named_parameters():
            if "lora_" in name and p.dtype != torch.float32:
                p.data = p.data.float()
    return model


def load_reward_model(path: str, cfg: ModelConfig, *, trainable: bool = True,
                      allowed_roots: Sequence[str] | None = None) -> nn.Module:
    """`AutoModelForSequenceClassification` with one label; a causal-LM directory gets a fresh
    `score` head (initialised from torch's global RNG: seed it first). With LoRA, the `score` head is
    fully trainable and saved with the adapter (peft `modules_to_save`)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    path, adapter = _checked_paths(path, cfg, allowed_roots)
    config = AutoConfig.from_pretrained(path, num_labels=1, trust_remote_code=False)
    if getattr(config, "pad_token_id", None) is None:
        # HF pools the last non-pad token and needs to know which id is padding.
        config.pad_token_id = _pad_id_for(path, config)
    model = AutoModelForSequenceClassification.from_pretrained(
        path, config=config, dtype=_load_dtype(cfg, adapter, trainable), use_safetensors=True)
    return _finish(model, cfg, adapter, trainable, task_type="SEQ_CLS")


def load_value_model(path: str, cfg: ModelConfig, *, trainable: bool = True,
                     allowed_roots: Sequence[str] | None = None) -> nn.Module:
    """The critic: the same class and format as the reward model; read it with `token_values`."""
    return load_reward_model(path, cfg, trainable=trainable, allowed_roots=allowed_roots)


def _checked_paths(path: str, cfg: ModelConfig, roots: Sequence[str] | None) -> tuple[str, str | None]:
    """(base model path, adapter dir or None). An adapter directory given as the model loads its
    base explicitly: `from_pretrained(adapter_dir)` would follow the adapter's base path unchecked."""
    adapter = cfg.lora_adapter_path
    if roots is not None:
        path = resolve_model_path(path, roots)
        adapter = resolve_model_path(adapter, roots) if adapter else None
    if os.path.isfile(os.path.join(path, "adapter_config.json")):
        if adapter:
            raise ConfigError("the model is an adapter directory and lora_adapter_path is set too",
                              param="model.lora_adapter_path")
        path, adapter = adapter_base(path), path
        if roots is not None:
            path = resolve_model_path(path, roots)
        if os.path.isfile(os.path.join(path, "adapter_config.json")):
            raise ModelNotAllowed(f"adapter base {path!r} is itself an adapter", param="model")
    if adapter and os.path.isdir(adapter) and not os.path.isfile(os.path.join(adapter, "adapter_model.safetensors")):
        # PeftModel would fall back to a pickled adapter_model.bin: refuse instead.
        raise ModelNotAllowed(f"{adapter!r} holds no adapter_model.safetensors", param="model.lora_adapter_path")
    return path, adapter


def _load_dtype(cfg: ModelConfig, adapter: str | None, trainable: bool) -> torch.dtype:
    """Weights a full fine-tune trains are float32 masters (`engine.runtime.precision`); a frozen model,
    or the frozen base under LoRA adapters, is held in the compute dtype."""
    if trainable and not (adapter or cfg.lora_rank):
        return torch.float32
    return DTYPES[cfg.dtype]


def disable_dropout(model: nn.Module) -> int:
    """Set every dropout probability in `model` to 0, leaving train mode on otherwise.

    PPO's ratio compares the update's log-probs with the rollout's, which are computed in eval
    mode: dropout in the update would make the ratio differ from 1 before any step. Covers
    `nn.Dropout` modules and the float attributes attention layers pass to their kernels
    (`attention_dropout` and the like); the model's config is left as it is (saved models keep it).

    Returns:
        How many dropout settings were non-zero.
    """
    changed = 0
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            changed += module.p > 0
            module.p = 0.0
            continue
        for name, value in list(vars(module).items()):
            if "dropout" in name and isinstance(value, float) and not isinstance(value, bool):
                changed += value > 0
                setattr(module, name, 0.0)
    return changed


def _pad_id_for(path: str, config: Any) -> int | None:
    try:
        return load_tokenizer(path).pad_token_id
    except (OSError, ValueError, KeyError, ModelNotAllowed):  # no usable tokenizer beside the weights
        eos = getattr(config, "eos_token_id", None)
        return eos[0] if isinstance(eos, list) else eos


def _finish(model: nn.Module, cfg: ModelConfig, adapter: str | None, trainable: bool,
            task_type: str) -> nn.Module:
    """Apply gradient checkpointing and LoRA, then set train/eval mode and requires_grad."""
    if cfg.enable_gradient_checkpointing and trainable:
        # Non-reentrant checkpointing lets gradients reach LoRA weights with a frozen embedding.
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        model.config.use_cache = False
    if cfg.use_remove_padding:
        packing.enable(model)  # before PEFT wraps it; the LoRA layers share the config
    rank = resolve_lora_rank(cfg.lora_rank, count_parameters(model)) if cfg.lora_rank else 0
    if adapter or rank:
        from peft import LoraConfig, PeftModel, get_peft_model

        if adapter:
            model = PeftModel.from_pretrained(model, adapter, is_trainable=trainable)
        else:
            targets = cfg.target_modules if isinstance(cfg.target_modules, str) else list(cfg.target_modules)
            lora = LoraConfig(r=rank, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, target_modules=targets,
                              task_type=task_type,
                              modules_to_save=["score"] if task_type == "SEQ_CLS" else None)
            model = get_peft_model(model, lora)
    if trainable:
        with torch.no_grad():
            for p in model.parameters():
                if p.requires_grad and p.dtype != torch.float32:
                    p.data = p.data.float()  # the float32 master copy (e.g. a LoRA score head)
        disable_dropout(model)
    else:
        model.requires_grad_(False)
    model.train(trainable)
    return model


def lora_view(base: nn.Module, cfg: ModelConfig, adapter: str | None = None) -> nn.Module:
    """A trainable LoRA policy over `base`'s tensors: new module objects (so each view gets adapter
    layers of its own) whose frozen weights are `base`'s very parameters, never copied. `base` is a
    frozen `load_policy(..., trainable=False)` model without an adapter; it is left unchanged. Seed
    torch's global RNG first, as for `load_policy`: a fresh adapter is initialised from it."""
    shared = {id(t): t for t in (*base.parameters(), *base.buffers())}
    view = copy.deepcopy(base, shared)  # the memo maps every tensor to itself: only modules are new
    return _finish(view, cfg, adapter, True, task_type="CAUSAL_LM")
