"""Loading and saving the three heads Keel trains: policy, reward model and value model.

- policy: a causal LM (`AutoModelForCausalLM`);
- reward model: `AutoModelForSequenceClassification` with `num_labels=1`; the score is the `score`
  head read at the last attended token, exactly what Hugging Face pools, so a saved reward model
  scores the same outside Keel;
- value model: the same class and on-disk format; its per-token values are the `score` head applied
  to every hidden state.

Weights are read and written as safetensors only (`use_safetensors=True`): nothing a user uploads
is ever unpickled. With LoRA (peft), the reference policy is the actor with its adapter disabled,
so the base weights exist once.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import re
import struct
from collections.abc import Iterator, Sequence
from math import prod
from pathlib import Path
from typing import Any, Literal

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


# --- forward helpers ---------------------------------------------------------------------------------

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


# --- saving ------------------------------------------------------------------------------------------

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
