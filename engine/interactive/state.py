"""A trainer's saved state: a Hugging Face model directory with the exact training state inside.

A state directory (`save_state`, and what `release_session` writes) is

- the model as `engine.models.save_model` writes it: `config.json`, safetensors and tokenizer (a
  LoRA trainer: the merged weights, plus the adapter alone in `adapter/`), so plain `transformers`
  (or `peft` on `adapter/`) loads it and Keel can register it as a model;
- `trainer/`: `engine.runtime.checkpoint.save_state` output: the trained tensors as float32 masters
  (`model.safetensors`: the full weights, or the adapter's), the AdamW state (`optim.optim.pt`,
  once a step was taken), float16's loss scale, and `extra.json` (step, sample counter, the
  trainer's model settings), so `load_state` continues exactly where the save was made;
- `COMPLETE`, written last (in `trainer/` too): a directory without it is never loaded.

A sampler snapshot (`save_weights_for_sampler`) is the model part only. Both are written atomically
(a local directory renamed into place, or uploaded with its marker last: `engine.runtime.artifacts`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from engine.errors import ConfigError
from engine.models import save_model
from engine.runtime.artifacts import Artifacts, is_remote
from engine.runtime.checkpoint import (
    COMPLETE,
    CheckpointError,
    atomic_dir,
    is_complete,
    load_extra,
    load_state,
    save_state,
)
from engine.runtime.precision import Precision

TRAINER_DIR = "trainer"
STATE_VERSION = 1


def check_location(ref: str, roots: Sequence[str], param: str) -> str:
    """`ref` if it lies under one of `roots` (local paths: symlinks resolved; URLs: by prefix, without
    `..` segments), else `ConfigError(param=param)`. A trainer reads states only where it may."""
    if is_remote(ref):
        if "/../" in f"{ref}/" or "/./" in f"{ref}/":
            raise ConfigError(f"{param}: {ref!r} is not a plain location", param=param)
        if any(is_remote(r) and ref.rstrip("/").startswith(r.rstrip("/") + "/") for r in roots if r):
            return ref
        raise ConfigError(f"{param}: {ref!r} is not under this trainer's state root or a model root", param=param)
    real = os.path.realpath(ref)
    for root in roots:
        if not root or is_remote(root):
            continue
        base = os.path.realpath(root)
        if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
            return real
    raise ConfigError(f"{param}: {ref!r} is not under this trainer's state root or a model root", param=param)


def _writing(target: str, artifacts: Artifacts):
    return artifacts.writing(target, marker=COMPLETE) if is_remote(target) else atomic_dir(target)


def save_weights(target: str, model: nn.Module, tokenizer: Any, precision: Precision,
                 artifacts: Artifacts) -> str:
    """Write the model alone (a sampler snapshot) to `target`; returns `hf` or `lora`."""
    with _writing(target, artifacts) as tmp:
        return save_model(model, tokenizer, tmp, dtype=precision.dtype)


def save_trainer_state(target: str, model: nn.Module, tokenizer: Any, precision: Precision,
                       optimizer: torch.optim.Optimizer | None, extra: dict[str, Any],
                       artifacts: Artifacts) -> str:
    """Write the model and the exact training state to `target`; returns `hf` or `lora`."""
    with _writing(target, artifacts) as tmp:
        kind = save_model(model, tokenizer, tmp, dtype=precision.dtype)
        inner = os.path.join(tmp, TRAINER_DIR)
        os.makedirs(inner)
        scaler = {"scaler": precision} if precision.scaler is not None else {}
        save_state(inner, modules={"model": model}, optimizers={"optim": optimizer} if optimizer else {},
                   schedulers=scaler, extra={**extra, "format": kind, "state_version": STATE_VERSION})
        with open(os.path.join(inner, COMPLETE), "w") as f:
            f.write("ok\n")
    return kind


def read_extra(local_dir: str, param: str) -> dict[str, Any]:
    """The `extra.json` of a staged state directory (`CheckpointError` when it is not one)."""
    inner = os.path.join(local_dir, TRAINER_DIR)
    if not is_complete(local_dir) or not is_complete(inner):
        raise CheckpointError(f"{param}: no complete trainer state there (a save_state directory)", param=param)
    return load_extra(inner)


def load_trainer_state(local_dir: str, model: nn.Module, precision: Precision,
                       optimizer: torch.optim.Optimizer | None, param: str) -> None:
    """Load the trained tensors (and, given `optimizer`, the AdamW state) of a staged state directory
    into live objects; the model must have the same trainable tensors (`CheckpointError` otherwise)."""
    inner = os.path.join(local_dir, TRAINER_DIR)
    saved_scale = os.path.isfile(os.path.join(inner, "scaler.sched.pt"))
    scaler = {"scaler": precision} if precision.scaler is not None and saved_scale else {}
    try:
        load_state(inner, modules={"model": model}, optimizers={"optim": optimizer} if optimizer else {},
                   schedulers=scaler, restore_rng=False)  # sampling is counter-based: no global RNG to restore
    except CheckpointError as err:
        raise CheckpointError(f"{param}: {err.message}", param=param, data=err.data) from None


def has_optimizer(local_dir: str) -> bool:
    return os.path.isfile(os.path.join(local_dir, TRAINER_DIR, "optim.optim.pt"))
