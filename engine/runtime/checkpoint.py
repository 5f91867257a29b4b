"""Training checkpoints: atomic directories holding weights, optimizer, scheduler, RNG and loop state.

A checkpoint is a directory `root/step_<N>` with:

- `<name>.safetensors` per module: the trainable parameters and buffers (frozen parameters, e.g. a
  LoRA base model, are reloaded from the base model and not repeated here),
- `<name>.optim.pt` / `<name>.sched.pt` per optimizer / scheduler (`torch.save`, read back with
  `weights_only=True`, so loading a checkpoint never runs pickled code),
- `rng.pt`: python, numpy, torch (and CUDA) generator states of the saving process,
- `extra.json`: the caller's loop state (step, epoch, data position, KL controller...),
- `hf/` (`HF_EXPORT`): the trained model as a Hugging Face directory (`engine.models.save_model`:
  config, safetensors, tokenizer; merged weights plus `adapter/` for LoRA), so a checkpoint is
  downloadable and usable as a model without Keel (the trainers write it, not `save_state`),
- `COMPLETE`: written last; a directory without it is never loaded.

The directory is written under a temporary name beside its final place, fsynced, then renamed, so a
crash leaves either the previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from engine.errors import EngineError

COMPLETE = "COMPLETE"
HF_EXPORT = "hf"
"""Sub-directory of a checkpoint (of each PPO role's part) holding its Hugging Face export."""
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointError(EngineError):
    """A checkpoint directory is missing, incomplete or does not fit the model being resumed."""

    code = "invalid_checkpoint"
    user_error = True


def step_dir(root: str | os.PathLike, step: int) -> str:
    """The directory of step `step`'s checkpoint under `root`: `root/step_<step>`."""
    return os.path.join(os.fspath(root), f"step_{step}")


def is_complete(path: str | os.PathLike) -> bool:
    """True when `path` is a checkpoint directory whose `COMPLETE` marker was written."""
    return os.path.isfile(os.path.join(os.fspath(path), COMPLETE))


def latest_checkpoint(root: str | os.PathLike | None) -> str | None:
    """The newest complete `step_<N>` directory under `root` (largest N), or None."""
    if root is None or not os.path.isdir(root):
        return None
    best: tuple[int, str] | None = None
    for entry in os.scandir(root):
        match = _STEP_DIR.match(entry.name)
        if match and entry.is_dir() and is_complete(entry.path):
            step = int(match.group(1))
            if best is None or step > best[0]:
                best = (step, entry.path)
    return None if best is None else best[1]


def _fsync_path(path: str, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # some filesystems refuse to open directories; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_dir(final_dir: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary directory beside `final_dir`; on success mark it `COMPLETE`, fsync it and
    rename it to `final_dir` (replacing an older directory of that name); on error remove it.

    Usage: `with atomic_dir(step_dir(root, 10)) as tmp: save_state(tmp, ...)`.
    """
    final = os.path.abspath(os.fspath(final_dir))
    parent, name = os.path.split(final)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{name}.tmp-{uuid.uuid4().hex[:8]}")
    os.makedirs(tmp)
    try:
        yield tmp
        with open(os.path.join(tmp, COMPLETE), "w") as f:
            f.write("ok\n")
        for dirpath, _, files in os.walk(tmp):
            for file in files:
                _fsync_path(os.path.join(dirpath, file))
            _fsync_path(dirpath, directory=True)
        old = None
        if os.path.exists(final):  # e.g. a step saved again after a crash before its report
            old = os.path.join(parent, f".{name}.old-{uuid.uuid4().hex[:8]}")
            os.rename(final, old)
        os.rename(tmp, final)
        _fsync_path(parent, directory=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _unwrap(module: nn.Module) -> nn.Module:
    # DistributedDataParallel (and similar wrappers) keep the real model in `.module`.
    return module.module if isinstance(module, nn.parallel.DistributedDataParallel) else module


def _saved_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """The state-dict entries worth saving: everything except frozen parameters."""
    frozen = {name for name, p in module.named_parameters(remove_duplicate=False) if not p.requires_grad}
    return {k: v for k, v in module.state_dict().items() if k not in frozen}


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith("."):
        raise ValueError(f"checkpoint entry name {name!r} must be a plain file-name stem")


def save_module(module: nn.Module, path: str) -> None:
    """Write `module`'s trainable parameters and buffers to a safetensors file.

    Tied tensors (e.g. shared input/output embeddings) are stored once; the other names are recorded
    as aliases in the file's metadata.
    """
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[int, int, tuple[int, ...], torch.dtype], str] = {}
    for key, value in _saved_tensors(_unwrap(module)).items():
        ident = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape), value.dtype)
        if ident in seen and value.numel() > 0:
            aliases[key] = seen[ident]
            continue
        seen[ident] = key
        tensors[key] = value.detach().to("cpu").contiguous()
    save_file(tensors, path, metadata={"format": "pt", "aliases": json.dumps(aliases)})


def load_module(module: nn.Module, path: str) -> None:
    """Load a file written by `save_module` into `module`; every trainable parameter must be in it
    and every tensor in it must exist in the module."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        aliases = json.loads((f.metadata() or {}).get("aliases", "{}"))
    tensors = load_file(path, device="cpu")
    for alias, source in aliases.items():
        tensors[alias] = tensors[source]
    target = _unwrap(module)
    result = target.load_state_dict(tensors, strict=False)
    if result.unexpected_keys:
        raise CheckpointError(f"checkpoint {path} holds tensors the model lacks: {result.unexpected_keys[:5]}",
                              data={"unexpected": result.unexpected_keys[:20]})
    missing = set(result.missing_keys) & set(_saved_tensors(target))
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks trainable tensors: {sorted(missing)[:5]}",
                              data={"missing": sorted(missing)[:20]})


def rng_state() -> dict[str, Any]:
    """The generator states of python, numpy, torch and CUDA, in a `weights_only`-loadable form."""
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {"key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
                  "pos": int(np_state["state"]["pos"]), "has_gauss": int(np_state["has_gauss"]),
                  "gauss": float(np_state["gauss"])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what `rng_state` returned."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state({"bit_generator": "MT19937",
                         "state": {"key": np_state["key"].numpy().astype(np.uint32), "pos": np_state["pos"]},
                         "has_gauss": np_state["has_gauss"], "gauss": np_state["gauss"]})
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_state(dir: str | os.PathLike, *, modules: Mapping[str, nn.Module],
               optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
               schedulers: Mapping[str, Any] | None = None,
               extra: Mapping[str, Any] | None = None) -> None:
    """Write a training state into `dir` (normally the temporary directory of `atomic_dir`).

    Args:
        dir: an existing, empty directory.
        modules: name -> module; trainable parameters and buffers as `<name>.safetensors`.
        optimizers: name -> optimizer; `<name>.optim.pt`.
        schedulers: name -> LR scheduler (anything with `state_dict`); `<name>.sched.pt`.
        extra: JSON-serialisable loop state, returned as-is by `load_state`.

    Call it on one process only (rank 0): data-parallel replicas hold the same weights and optimizer
    state. The RNG states saved are this process's.
    """
    out = os.fspath(dir)
    for name, module in modules.items():
        _check_name(name)
        save_module(module, os.path.join(out, f"{name}.safetensors"))
    for name, optimizer in (optimizers or {}).items():
        _check_name(name)
        torch.save(optimizer.state_dict(), os.path.join(out, f"{name}.optim.pt"))
    for name, scheduler in (schedulers or {}).items():
        _check_name(name)
        torch.save(scheduler.state_dict(), os.path.join(out, f"{name}.sched.pt"))
    torch.save(rng_state(), os.path.join(out, "rng.pt"))
    meta = {"format_version": FORMAT_VERSION, "modules": sorted(modules),
            "optimizers": sorted(optimizers or {}), "schedulers": sorted(schedulers or {})}
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(out, "extra.json"), "w") as f:
        json.dump(dict(extra or {}), f, sort_keys=True)


def load_extra(dir: str | os.PathLike) -> dict[str, Any]:
    """Only the loop state (`extra`) of a complete checkpoint."""
    path = os.fspath(dir)
    if not is_complete(path):
        raise CheckpointError(f"{path} is not a complete checkpoint (no {COMPLETE} marker)",
                              param="resume_from")
    with open(os.path.join(path, "extra.json")) as f:
        return json.load(f)


def load_state(dir: str | os.PathLike, *, modules: Mapping[str, nn.Module],
               optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
               schedulers: Mapping[str, Any] | None = None, restore_rng: bool = True) -> dict[str, Any]:
    """Restore what `save_state` wrote into live objects; returns `extra`.

    Every name passed must be present in the checkpoint (else `CheckpointError`); objects in the
    checkpoint that are not asked for are ignored (e.g. a critic when only the actor is resumed).
    The RNG states are restored too unless `restore_rng=False`.
    """
    path = os.fspath(dir)
    extra = load_extra(path)

    def file(name: str, suffix: str) -> str:
        _check_name(name)
        target = os.path.join(path, f"{name}{suffix}")
        if not os.path.isfile(target):
            raise CheckpointError(f"checkpoint {path} has no {name}{suffix}", param="resume_from")
        return target

    configured = {name: _hyperparameters(o) for name, o in (optimizers or {}).items()}
    base_lrs = {name: list(s.base_lrs) for name, s in (schedulers or {}).items() if hasattr(s, "base_lrs")}
    for name, module in modules.items():
        load_module(module, file(name, ".safetensors"))
    for name, optimizer in (optimizers or {}).items():
        optimizer.load_state_dict(torch.load(file(name, ".optim.pt"), map_location="cpu", weights_only=True))
    for name, scheduler in (schedulers or {}).items():
        scheduler.load_state_dict(torch.load(file(name, ".sched.pt"), map_location="cpu", weights_only=True))
    _keep_configured(optimizers or {}, schedulers or {}, configured, base_lrs)
    if restore_rng:
        set_rng_state(torch.load(file("rng", ".pt"), map_location="cpu", weights_only=True))
    return extra


def _hyperparameters(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    return [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]


def _keep_configured(optimizers: Mapping[str, torch.optim.Optimizer], schedulers: Mapping[str, Any],
                     configured: Mapping[str, list[dict[str, Any]]], base_lrs: Mapping[str, list[float]]) -> None:
    """The run's own hyperparameters over the checkpoint's: a state dict also carries the optimizer's
    param-group settings (lr, weight decay, betas) and the scheduler's base learning rates, and loading
    it would silently undo a continuation's (a fork's) new values. The state proper (moments, step
    counts, the schedule's position) stays the checkpoint's. The scheduled lr is rescaled by the new
    base over the saved one, so an unchanged config keeps every value bitwise."""
    for name, scheduler in schedulers.items():
        if name not in base_lrs:
            continue
        for group, saved, new in zip(scheduler.optimizer.param_groups, scheduler.base_lrs, base_lrs[name], strict=True):
            if new != saved:
                group["lr"] = group["lr"] * (new / saved) if saved else new
                group["initial_lr"] = new
        scheduler.base_lrs = list(base_lrs[name])
        if hasattr(scheduler, "_last_lr"):  # what `get_last_lr` reports
            scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]
    scheduled = {id(s.optimizer) for n, s in schedulers.items() if n in base_lrs}
    for name, optimizer in optimizers.items():
        for group, wanted in zip(optimizer.param_groups, configured[name], strict=True):
            for key, value in wanted.items():
                if key not in ("lr", "initial_lr") or id(optimizer) not in scheduled:
                    group[key] = value


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """N for a `.../step_<N>` path, else None."""
    match = _STEP_DIR.match(Path(path).name)
    return int(match.group(1)) if match else None
