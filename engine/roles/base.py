"""What every role worker shares: device and threads, the data-parallel group, batched forwards,
and (for the trained roles) the optimizer step, in-memory snapshots and checkpoints.

Role classes are plain Python classes: tests build them directly; `engine.roles.remote` wraps each
with `ray.remote` once. Every method that does work returns a dict with its wall time `time_s`, so
the driver can report per-phase timings while all roles run at once.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import torch
from torch import nn

from engine import packing
from engine.algos import log_probs_and_entropy, log_probs_from_logits
from engine.models import logits_at, save_model
from engine.roles.batch import (
    Batch,
    concat,
    micro_batches,
    mini_batch_rows,
    num_rows,
    response_positions,
    row_lengths,
    select,
    trim,
)
from engine.rollout import prefix
from engine.runtime import distributed, sharding, ulysses
from engine.runtime.artifacts import Artifacts
from engine.runtime.checkpoint import HF_EXPORT, load_state, save_state
from engine.runtime.precision import Precision

SEQ_KEYS = ("input_ids", "attention_mask")


class Role:
    """Process-level plumbing of one worker of one role.

    Args:
        rank, world_size: this worker's place in its role's data-parallel group.
        num_threads: torch intra-op threads (None: leave torch's default).
        seed: seeds torch's global RNG before any model is built (fresh value heads).
        use_gpu: put the model on CUDA device 0 (Ray sets `CUDA_VISIBLE_DEVICES`) when one is visible.
        artifacts: the job's store; this worker stages the models and checkpoints it reads and uploads
            what it writes itself (it may run on any node). None: local paths only.
    """

    def __init__(self, *, rank: int = 0, world_size: int = 1, num_threads: int | None = None, seed: int = 0,
                 use_gpu: bool = False, artifacts: Artifacts | None = None) -> None:
        self.artifacts = artifacts or Artifacts()
        if num_threads:
            torch.set_num_threads(num_threads)
        torch.manual_seed(seed)
        self.rank, self.world_size = rank, world_size
        self.device = torch.device("cuda", 0) if use_gpu and torch.cuda.is_available() else torch.device("cpu")

    def ready(self) -> bool:
        """Answers once the constructor has finished (the driver waits on it)."""
        return True

    def rendezvous(self) -> tuple[str, int]:
        return distributed.rendezvous()

    def node(self) -> dict[str, Any]:
        """Where this worker runs (`job.placement`)."""
        return distributed.node_identity()

    def init_process_group(self, endpoint: tuple[str, int]) -> None:
        if self.world_size > 1:
            distributed.init_process_group(self.rank, self.world_size, endpoint, self.device)
            self.after_process_group()

    def after_process_group(self) -> None:
        """Hook: the data-parallel group exists now (a colocated host calls it on every role)."""

    sp: ulysses.Layout = ulysses.Layout()
    """This worker's sequence-parallel group (`engine.runtime.ulysses`; a group of one by default)."""

    def _sequence_parallel(self, model: nn.Module, size: int, param: str) -> None:
        """Groups of `size` consecutive workers share their rows and split every packed row's tokens
        (`engine.runtime.ulysses`). Every worker of the process group calls it, in the same role order."""
        self.sp = ulysses.layout(size, self.rank, self.world_size)
        ulysses.enable(model, self.sp, param)

    def apply(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `fn(self, *args, **kwargs)` in the worker (diagnostics and fault-injection tests)."""
        return fn(self, *args, **kwargs)

    def shutdown(self) -> None:
        distributed.destroy_process_group()


class MetricSums:
    """Weighted sums of metrics across micro-batches (and workers): `mean = sum / weight`."""

    def __init__(self) -> None:
        self.sums: dict[str, list[float]] = {}

    def add(self, name: str, value: float, weight: float = 1.0) -> None:
        entry = self.sums.setdefault(name, [0.0, 0.0])
        entry[0] += float(value) * weight
        entry[1] += weight

    def merge(self, other: Mapping[str, Sequence[float]]) -> None:
        for name, (total, weight) in other.items():
            entry = self.sums.setdefault(name, [0.0, 0.0])
            entry[0] += total
            entry[1] += weight

    def means(self) -> dict[str, float]:
        return {k: (s / w if w else math.nan) for k, (s, w) in self.sums.items()}


def trim_rows(batch: Batch, device: torch.device) -> Batch:
    """A micro-batch cut to its longest sequence and longest response, on `device`."""
    out = trim(batch)
    resp_width = max(1, int(batch["response_mask"].sum(-1).max()))
    return {k: (v if k in SEQ_KEYS or v.dim() < 2 else v[:, :resp_width]).to(device) for k, v in out.items()}


def pad_response(x: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad a `(batch, r)` tensor with zeros to `(batch, width)`."""
    return torch.nn.functional.pad(x, (0, width - x.shape[1]))


def iter_micro_batches(batch: Batch, rows: Sequence[int], *, dynamic: bool, max_tokens: int, size: int,
                       device: torch.device, packed: bool = False,
                       model: nn.Module | None = None) -> Iterator[tuple[list[int], Batch]]:
    """`(global row indices, trimmed micro-batch)` over `rows` of `batch` (`packed`: the model
    packs its rows, so the token budget counts real tokens).

    `model` (the policy that scores the micro-batches) with `dynamic`: when rows share a prompt
    and `engine.rollout.prefix` runs the model (each distinct prompt once), a prompt's rows stay in one
    micro-batch and the budget counts the prompt once.
    """
    all_lengths = row_lengths(batch)
    lengths = [all_lengths[i] for i in rows]
    groups = None
    if model is not None and dynamic and rows:
        sub = select(batch, list(rows))
        groups = prefix.row_groups(sub["input_ids"], sub["prompt_lens"])
        if len(groups) == len(rows) or not prefix.supports(model) or ulysses.layout_of(model).size > 1:
            groups = None
    if groups is not None:
        prompt_lens = sub["prompt_lens"].tolist()
        costs = [prompt_lens[g[0]] + sum(lengths[i] - prompt_lens[i] for i in g) for g in groups]
        units = [[i for u in unit for i in groups[u]] for unit in packing.budget_batches(costs, max_tokens)]
    else:
        units = micro_batches(lengths, dynamic=dynamic, max_tokens=max_tokens, size=size, packed=packed)
    for group in units:
        index = [rows[i] for i in group]
        yield index, trim_rows(select(batch, index), device)


def policy_log_probs(model: nn.Module, mb: Batch, *, temperature: float,
                     entropy: Literal["off", "grad", "metric"] = "off") -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs `(b, r)` of the response tokens of a trimmed micro-batch under `model` (logits divided
    by the sampling temperature, as in VERL), and the per-token entropy unless `entropy="off"`.

    Only the response positions' logits are computed (`engine.models.logits_at`; rows that share a
    prompt through `engine.rollout.prefix`, the prompt once). The entropy is a full-vocabulary softmax per
    token: `grad` keeps it in the graph (a loss term), `metric` computes it detached, so backward
    stores nothing for it.
    """
    if ulysses.layout_of(model).size > 1:
        return _sharded_log_probs(model, mb, temperature=temperature, entropy=entropy)
    groups = prefix.row_groups(mb["input_ids"], mb["prompt_lens"])
    if len(groups) < len(mb["prompt_lens"]) and prefix.supports(model):
        logits = prefix.response_logits(model, mb["input_ids"], mb["prompt_lens"], mb["responses"], groups).float()
    else:
        positions = response_positions(mb["prompt_lens"], mb["responses"].shape[1], mb["input_ids"].shape[1])
        logits = logits_at(model, mb["input_ids"], mb["attention_mask"], positions).float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    if entropy == "off":
        return log_probs_from_logits(logits, mb["responses"]), None
    return log_probs_and_entropy(logits, mb["responses"], entropy_grad=entropy == "grad")


def _sharded_log_probs(model: nn.Module, mb: Batch, *, temperature: float,
                       entropy: Literal["off", "grad", "metric"]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`policy_log_probs` under Ulysses sequence parallelism: each rank of the group takes the LM head
    and the log-softmax at `1/sp` of the response positions; the `(b, r)` results are the group's sums
    (`engine.runtime.ulysses.head_outputs`)."""
    packed = packing.pack_padded(mb["input_ids"], mb["attention_mask"])
    positions = response_positions(mb["prompt_lens"], mb["responses"].shape[1], mb["input_ids"].shape[1])
    index = torch.arange(packed.total, device=positions.device)[None, :]
    flat = packed.at(index, positions).reshape(-1)  # packed token of each (row, response position)
    targets = mb["responses"].reshape(-1)

    def per_token(logits: torch.Tensor, part: slice) -> list[torch.Tensor]:
        logits = logits.float()
        if temperature > 0 and temperature != 1.0:
            logits = logits / temperature
        if entropy == "off":
            return [log_probs_from_logits(logits, targets[part])]
        return list(log_probs_and_entropy(logits, targets[part], entropy_grad=entropy == "grad"))

    outs = [o.view_as(mb["responses"]) for o in ulysses.head_outputs(model, packed, flat, per_token)]
    return outs[0], (outs[1] if entropy != "off" else None)


def share_rows(batch: Batch, lay: ulysses.Layout,
               sizes: Sequence[int] | None = None) -> tuple[Batch, list[int], list[int]]:
    """The rows of a sequence-parallel group: every rank of `lay`'s group gets the same batch.

    Each rank brings its own rows (cut into mini-batches of `sizes`, one without); the group's batch
    holds mini-batch `k` of every rank, in rank order, then mini-batch `k + 1`: with `shard_rows`'s
    layout that is the global order. Returns `(group batch, its mini-batch sizes, where this rank's
    rows sit in it)`.
    """
    sizes = list(sizes) if sizes is not None else [num_rows(batch)]
    parts = ulysses.gather_objects((batch, sizes), lay)
    pieces, group_sizes, mine, offset = [], [], [], 0
    for k in range(len(sizes)):
        group_sizes.append(0)
        for rank, (part, part_sizes) in enumerate(parts):
            rows = mini_batch_rows(part_sizes)[k]
            pieces.append(select(part, rows))
            if rank == lay.rank:
                mine.extend(range(offset, offset + len(rows)))
            offset += len(rows)
            group_sizes[-1] += len(rows)
    return concat(pieces), group_sizes, mine


@torch.no_grad()
def batched_log_probs(model: nn.Module, batch: Batch, *, temperature: float, dynamic: bool, max_tokens: int,
                      size: int, device: torch.device) -> torch.Tensor:
    """`(batch, R)` response log-probs for a whole batch, micro-batched, on CPU (zeros on padding).
    Under Ulysses sequence parallelism the group's ranks score the group's rows together, each
    returning its own."""
    kw = {"temperature": temperature, "dynamic": dynamic, "max_tokens": max_tokens, "size": size, "device": device}
    lay = ulysses.layout_of(model)
    if lay.size == 1:
        return _batched_log_probs(model, batch, **kw)
    group, _, mine = share_rows(batch, lay)
    return _batched_log_probs(model, group, **kw)[mine]


def _batched_log_probs(model: nn.Module, batch: Batch, *, temperature: float, dynamic: bool, max_tokens: int,
                       size: int, device: torch.device) -> torch.Tensor:
    width = batch["responses"].shape[1]
    out = torch.zeros(batch["responses"].shape, dtype=torch.float32)
    was_training = model.training
    model.eval()
    try:
        for index, mb in iter_micro_batches(batch, range(len(batch["input_ids"])), dynamic=dynamic,
                                            max_tokens=max_tokens, size=size, device=device,
                                            packed=packing.enabled(model), model=model):
            log_probs, _ = policy_log_probs(model, mb, temperature=temperature)
            out[index] = pad_response(log_probs, width).cpu()
    finally:
        model.train(was_training)
    return out


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
