"""The trained roles' base (`TrainableRole`: actor, critic): model, AdamW and LR schedule, the
optimizer step in lock-step across workers, in-memory snapshots to roll back to, and checkpoints
(with a Hugging Face export).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from engine.models import save_model
from engine.roles.base import Role
from engine.roles.batch import Batch
from engine.roles.forward import iter_micro_batches
from engine.runtime import distributed, sharding
from engine.runtime.checkpoint import HF_EXPORT, load_state, save_state
from engine.runtime.precision import Precision


def _clone_to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _clone_to_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_clone_to_cpu(v) for v in value)
    return value


def _copy_into_cpu(buffers: Any, value: Any) -> Any:
    """`_clone_to_cpu(value)`, reusing the matching CPU tensors of `buffers` (an earlier result of
    this function for the same structure) with `copy_` instead of allocating new ones.

    A CUDA tensor goes into pinned memory with a non-blocking copy (the caller orders it with a
    stream and waits for it before the source changes or the buffer is read on the host)."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if not (isinstance(buffers, torch.Tensor) and buffers.shape == value.shape
                and buffers.dtype == value.dtype and buffers.device.type == "cpu"):
            buffers = torch.empty(value.shape, dtype=value.dtype, device="cpu", pin_memory=value.is_cuda)
        with torch.no_grad():
            return buffers.copy_(value, non_blocking=value.is_cuda)
    if isinstance(value, dict):
        old = buffers if isinstance(buffers, dict) else {}
        return {k: _copy_into_cpu(old.get(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        old = buffers if isinstance(buffers, list | tuple) and len(buffers) == len(value) else [None] * len(value)
        return type(value)(_copy_into_cpu(b, v) for b, v in zip(old, value))
    return value


class TrainableRole(Role):
    """A role with a model, an AdamW optimizer and an LR schedule (actor, critic).

    Subclasses set `self.model`, `self.optimizer`, `self.scheduler` and call `_init_grads()`.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    precision: Precision = Precision("float32", "cpu")
    """Subclasses set their job's (`model.dtype`); a float32 one holds no state, so it can be shared."""
    _snapshot: dict[str, Any] | None = None
    _snapshot_stream: Any = None
    _snapshot_pending: Any = None
    sharded: sharding.Sharded | None = None
    """Set when the role's `strategy` is fsdp2 and it has several workers (`after_process_group`)."""
    _rebuild: Callable[[], None] | None = None
    """Subclasses: rebuild `optimizer` and `scheduler` over the model's current parameters."""
    _strategy: tuple[str, Any] = ("ddp", None)
    """`(strategy, fsdp_config)` of the role's config."""
    _ulysses: tuple[int, str] = (1, "ulysses_sequence_parallel_size")
    """`(ulysses_sequence_parallel_size, its param name)` of the role's config."""
    tokenizer: Any = None
    """Saved beside the weights in the checkpoints' Hugging Face export."""

    def after_process_group(self) -> None:
        """fsdp2: shard the model, then rebuild the optimizer and scheduler over the sharded
        parameters (nothing has stepped yet)."""
        self._sequence_parallel(self.model, *self._ulysses)
        strategy, fsdp = self._strategy
        if strategy != "fsdp2" or self.world_size == 1:
            return
        self.sharded = sharding.shard_model(self.model, fsdp, dtype=self.precision.dtype, device=self.device)
        assert self._rebuild is not None
        self._rebuild()
        if fsdp.optimizer_offload:
            sharding.OptimizerOffload(self.optimizer, self.device)
        self._init_grads()
        self._after_weights_changed()

    def idle_gather(self) -> dict[str, float]:
        """Join the collective unshard of a `gathered` phase this worker has no rows for (fsdp2)."""
        with sharding.gathered(self.sharded):
            pass
        return {"time_s": 0.0}

    def _lockstep(self, micro: list[tuple[list[int], Batch]], batch: Batch, rows: Sequence[int],
                  **kw: Any) -> list[tuple[tuple[list[int], Batch], bool]]:
        """`(micro-batch, real)`: under fsdp2 padded with fillers to the busiest worker's count."""
        if self.sharded is None:
            return [(mb, True) for mb in micro]
        some = list(rows[:1]) or list(range(min(1, len(batch["input_ids"]))))
        filler = next(iter_micro_batches(batch, some, **kw), None) if some else None
        if filler is None and micro:
            filler = micro[0]
        return sharding.lockstep(micro, filler, active=True, device=self.device)

    def state_bytes(self) -> float:
        """Parameters, gradients and optimizer state this worker holds (local shards under fsdp2)."""
        return float(sharding.state_bytes(self.model, self.optimizer))

    def _params(self) -> list[nn.Parameter]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _init_grads(self) -> None:
        # Zero gradients from the start: every rank then all-reduces the same tensors in the same
        # order, even a rank whose shard of a mini-batch is empty.
        for p in self._params():
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    def _global_sum(self, values: Sequence[float]) -> list[float]:
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        return distributed.all_reduce_sum(t).tolist() if self.world_size > 1 else t.tolist()

    def _optimizer_step(self, grad_clip: float) -> tuple[float, bool]:
        """Sum gradients over the group, clip, and step unless the norm is non-finite.

        Returns:
            `(grad_norm, finite)`; a non-finite step leaves the weights untouched. With float16
            loss scaling an overflow only skips the step (the scaler shrinks its scale): `finite`
            is False only when the loss itself was not finite.
        """
        params = self._params()
        distributed.all_reduce_grads(params)
        self._await_snapshot()  # the snapshot must have read the weights before they change
        any_worker = self._any_worker if self.world_size > 1 else None
        norm, _, nonfinite = self.precision.step(self.optimizer, params, grad_clip, any_worker)
        self.optimizer.zero_grad(set_to_none=False)
        return norm, not nonfinite

    def _any_worker(self, flag: bool) -> bool:
        """Whether `flag` is set on any worker of the group (every worker must call it)."""
        return self._global_sum([float(flag)])[0] > 0

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def scale_lr(self, factor: float) -> float:
        """Multiply the learning rate (now and for the rest of the schedule) by `factor`."""
        for group in self.optimizer.param_groups:
            group["lr"] *= factor
        self.scheduler.base_lrs = [lr * factor for lr in self.scheduler.base_lrs]
        return self.current_lr()

    # --- last good state, in memory ------------------------------------------------------------

    def _trained_tensors(self) -> dict[str, torch.Tensor]:
        named = dict(self.model.named_parameters())
        # fsdp2: this worker's shards, as plain tensors sharing the parameters' storage.
        tensors = {k: sharding.local(p) for k, p in named.items() if p.requires_grad}
        tensors.update(dict(self.model.named_buffers()))
        return tensors

    def snapshot(self) -> dict[str, float]:
        """Keep a CPU copy of the weights being trained, the optimizer, the scheduler (and the
        float16 loss scale).

        Taken every step (the state a rollback returns to is always the start of the step being
        retried), but cheaply: after the first snapshot, the tensors are `copy_`-ed into the
        buffers of the previous one (same names, shapes and dtypes), so a step allocates and
        page-faults nothing; only frozen weights are left out (they never change). A tensor whose
        shape or dtype changed, or one that is new (Adam's state appears after the first step), gets
        a fresh copy. `restore` still hands the optimizer and the scheduler clones, so the buffers
        are never shared with live state.

        On CUDA the buffers are pinned and the copies run asynchronously on a side stream: the
        step's generation overlaps them, and the first optimizer step (or a restore) waits for them.
        `time_s` is the time this call took (on CUDA: to enqueue the copies).
        """
        start = time.perf_counter()
        self._await_snapshot()
        previous = self._snapshot or {}
        tensors, optimizer = self._trained_tensors(), sharding.local_optimizer_state(self.optimizer.state_dict())
        on_cuda = self.device.type == "cuda"
        if on_cuda:
            if self._snapshot_stream is None:
                self._snapshot_stream = torch.cuda.Stream(self.device)
            self._snapshot_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._snapshot_stream) if on_cuda else contextlib.nullcontext():
            self._snapshot = {
                "tensors": _copy_into_cpu(previous.get("tensors"), tensors),
                "optimizer": _copy_into_cpu(previous.get("optimizer"), optimizer),
                "scheduler": _clone_to_cpu(self.scheduler.state_dict()),
                "precision": self.precision.state_dict(),
            }
            if on_cuda:
                self._snapshot_pending = torch.cuda.Event()
                self._snapshot_pending.record(self._snapshot_stream)
        return {"time_s": time.perf_counter() - start}

    def _await_snapshot(self) -> None:
        """Order everything after this call behind the snapshot's copies (CUDA; a no-op on CPU)."""
        if self._snapshot_pending is not None:
            torch.cuda.current_stream(self.device).wait_event(self._snapshot_pending)
            self._snapshot_pending.synchronize()  # the host reads the buffers next (restore)
            self._snapshot_pending = None

    def restore(self) -> dict[str, float]:
        """Go back to the last `snapshot` (the snapshot is kept: it can be restored again)."""
        if self._snapshot is None:
            raise RuntimeError("restore() before any snapshot()")
        start = time.perf_counter()
        self._await_snapshot()
        live = self._trained_tensors()
        with torch.no_grad():
            for name, saved in self._snapshot["tensors"].items():
                live[name].copy_(saved, non_blocking=saved.is_pinned())
        # Clones: load_state_dict may keep the given tensors, and Adam updates its state in place.
        self.optimizer.load_state_dict(sharding.sharded_optimizer_state(
            self.optimizer, _clone_to_cpu(self._snapshot["optimizer"])))
        self.scheduler.load_state_dict(_clone_to_cpu(self._snapshot["scheduler"]))
        self.precision.load_state_dict(self._snapshot["precision"])
        self.optimizer.zero_grad(set_to_none=False)
        self._after_weights_changed()
        return {"time_s": time.perf_counter() - start}

    def _after_weights_changed(self) -> None:
        """Hook: e.g. push the weights to a separate rollout engine."""

    # --- checkpoints ---------------------------------------------------------------------------

    def _schedulers(self) -> dict[str, Any]:
        # float16's loss scale is state too (exact resume); other dtypes keep the old layout.
        scaler = {"scaler": self.precision} if self.precision.scaler is not None else {}
        return {"sched": self.scheduler, **scaler}

    def save_checkpoint(self, directory: str, extra: Mapping[str, Any] | None = None) -> dict[str, float]:
        """Rank 0 writes model, optimizer and scheduler under `directory` (replicas are identical),
        and the model as a Hugging Face directory in `directory/hf` (`HF_EXPORT`)."""
        start = time.perf_counter()
        if self.sharded is not None:  # every worker is called and adds its shards (a URL: from its node)
            with self.artifacts.adding(directory) as local:
                sharding.save_shards(local, "model", self.model, self.optimizer)
                if self.rank == 0:
                    save_state(local, modules={}, schedulers=self._schedulers(), extra=dict(extra or {}))
                self._export(local)  # collective: gathers the full weights to rank 0
            torch.distributed.barrier()
        elif self.rank == 0:
            with self.artifacts.writing(directory) as local:  # a URL: written here, then uploaded
                save_state(local, modules={"model": self.model}, optimizers={"optim": self.optimizer},
                           schedulers=self._schedulers(), extra=dict(extra or {}))
                self._export(local)
        return {"time_s": time.perf_counter() - start}

    def _full_model(self) -> nn.Module | None:
        """`sharding.full_model`: the whole trained model at rank 0 (collective under fsdp2)."""
        return sharding.full_model(self.model, self.sharded is not None, self.rank)

    def _export(self, directory: str) -> None:
        model = self._full_model()
        if model is not None:
            save_model(model, self.tokenizer, os.path.join(directory, HF_EXPORT), dtype=self.precision.dtype)

    def load_checkpoint(self, directory: str) -> dict[str, Any]:
        """Every rank loads the same state; returns the checkpoint's `extra`."""
        self._await_snapshot()
        directory = self.artifacts.stage(directory)  # a URL: this node's copy
        if self.sharded is not None:
            sharding.load_shards(directory, "model", self.model, self.optimizer)
            extra = load_state(directory, modules={}, schedulers=self._schedulers())
        else:
            sharding.refuse_shards(directory)
            extra = load_state(directory, modules={"model": self.model},
                               optimizers={"optim": self.optimizer}, schedulers=self._schedulers())
        self.optimizer.zero_grad(set_to_none=False)
        self._after_weights_changed()
        return extra
