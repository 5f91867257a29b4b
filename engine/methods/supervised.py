"""The supervised training loop shared by SFT, reward-model training and reward-model distillation.

One driver loop, read top to bottom: prepare, set up, resume, then per step: train, validate when
due, report, checkpoint when due, stop when cancelled (checkpoint, then stop, when paused); finally check the method's gate and save.
The per-method parts (which model, how examples are tokenized, the loss) live in a `Task` class;
the data-parallel worker (`SupervisedWorker`) is a plain class, run in-process for one worker or as
Ray actors for several (`engine.runtime.distributed`).

Data order and exact resume: the rows of global step `s` (1-based) are a function of the seed and
`s` alone: epoch `e = (s - 1) // steps_per_epoch` is a permutation drawn from `(seed, e)`, and the
step takes the next `train_batch_size` rows of it. A checkpoint therefore only needs the step.

Loss scaling: every worker divides its micro-batch loss sums by the *global* batch's normaliser
(response tokens for SFT, pairs otherwise), and gradients are summed, not averaged, across workers,
so one worker and N workers compute the same gradient (up to float summation order).
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from torch import nn

from engine import data as data_lib
from engine import models, packing
from engine.config import JobRequest, JobResult, check_parallel
from engine.errors import Cancelled, ConfigError, DataError, Paused
from engine.runtime import sharding, ulysses
from engine.runtime.artifacts import Artifacts, for_request, is_remote, join, localize
from engine.runtime.checkpoint import (
    COMPLETE,
    HF_EXPORT,
    CheckpointError,
    atomic_dir,
    is_complete,
    latest_checkpoint,
    load_state,
    save_state,
    step_dir,
)
from engine.runtime.distributed import (
    TorchThreads,
    all_reduce_grads,
    all_reduce_sum,
    destroy_process_group,
    device_for,
    init_process_group,
    make_group,
    node_identity,
    rendezvous,
    worker_threads,
)
from engine.runtime.precision import Precision
from engine.runtime.reporting import Reporter
from engine.runtime.watchdog import MaxDurationExceeded
from engine.schedule import build_optimizer, build_scheduler

HOLDOUT_FRACTION = 0.1
"""Share of the training rows held out for validation when the request has no validation file."""


class Task(Protocol):
    """What a method plugs into the loop. Instances live in each worker."""

    data_kind: ClassVar[str]
    """`engine.data` dataset kind: `sft` or `preference`."""
    row_cost: ClassVar[int]
    """Sequences per row in a forward pass (2 for a chosen/rejected pair), for the token budget."""
    stat_keys: ClassVar[tuple[str, ...]]
    """Names of the sums `forward` returns; summed over micro-batches and workers."""

    def __init__(self, request: JobRequest, device: torch.device) -> None: ...

    def prepare(self) -> str | None:
        """Once per job, on rank 0, before `load_model` (e.g. score the data with a teacher); may
        return a line for the job log."""

    def load_model(self) -> tuple[nn.Module, Any]:
        """(trainable model, tokenizer)."""

    def tokenize(self, rows: list[dict], split: str) -> list[Any]:
        """One example per row (`split` is `train` or `val`)."""

    def length(self, example: Any) -> int:
        """Longest sequence of the example (the token budget unit)."""

    def tokens(self, example: Any) -> int:
        """All tokens of the example (the token budget unit of packed micro-batches)."""

    def weight(self, example: Any) -> float:
        """The example's share of the loss normaliser (response tokens, or 1 per pair)."""

    def forward(self, model: nn.Module, examples: Sequence[Any]) -> tuple[torch.Tensor, dict[str, float]]:
        """(sum of per-unit losses, a scalar tensor to backpropagate; `stat_keys` sums, including
        `real_tokens` and `padded_tokens`)."""

    def metrics(self, stats: Mapping[str, float], split: str) -> dict[str, float]:
        """Metric names and values from summed `stats`; `split` is `train` or `val`."""


# --- data: rows, split and order ------------------------------------------------------------------

def split_rows(request: JobRequest, kind: str) -> tuple[list[dict], list[dict]]:
    """(train rows, validation rows). Without a validation file, a seeded `HOLDOUT_FRACTION` of the
    training rows (at least one, when there are two or more) is held out."""
    store = for_request(request)  # a no-op for a `localize`d request
    train = data_lib.load_rows(store.stage(request.training_file), kind)
    if not train:
        raise DataError("the training file has no rows", param="training_file")
    if request.validation_file:
        return train, data_lib.load_rows(store.stage(request.validation_file), kind)
    if len(train) < 2:
        return train, []
    n_val = max(1, int(len(train) * HOLDOUT_FRACTION))
    order = np.random.default_rng([request.seed, 0x5EED]).permutation(len(train))
    held = set(order[:n_val].tolist())
    return ([r for i, r in enumerate(train) if i not in held], [r for i, r in enumerate(train) if i in held])


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """Row order of `epoch`: a permutation that depends only on (seed, epoch)."""
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng([seed, epoch]).permutation(n)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes derived once from the data and the config."""

    n_train: int
    n_val: int
    batch_size: int
    steps_per_epoch: int
    total_steps: int

    def epoch_of(self, step: int) -> int:
        """0-based epoch of 1-based `step`."""
        return (step - 1) // self.steps_per_epoch


def make_plan(cfg: Any, n_train: int, n_val: int) -> Plan:
    batch = min(cfg.data.train_batch_size, n_train)
    steps_per_epoch = n_train // batch  # drop the last partial batch: every step sees `batch` rows
    total = cfg.trainer.total_training_steps or cfg.trainer.total_epochs * steps_per_epoch
    return Plan(n_train, n_val, batch, steps_per_epoch, total)


# --- the worker -------------------------------------------------------------------------------------

class SupervisedWorker:
    """One data-parallel replica: the model, optimizer, scheduler and all tokenized examples."""

    def __init__(self, task_cls: type, request: JobRequest, *, rank: int, world_size: int) -> None:
        # This worker may run on any node: it reads its own copies of the job's inputs.
        self.artifacts = for_request(request)
        request = localize(request, self.artifacts)
        self.request, self.cfg = request, request.config
        self.rank, self.world_size = rank, world_size
        self.device = device_for(request.resources)
        # The CPUs the worker was given, no more (`worker_threads`), in a Ray actor as in the caller's
        # process (a single worker), where `shutdown` puts the process's own setting back.
        self.threads = TorchThreads(worker_threads(request.resources))
        self.task = task_cls(request, self.device)

    # group plumbing
    def rendezvous(self) -> tuple[str, int]:
        return rendezvous()

    def node(self) -> dict[str, Any]:
        return node_identity()

    def init_process_group(self, endpoint: tuple[str, int]) -> None:
        init_process_group(self.rank, self.world_size, endpoint, self.device)

    def shutdown(self) -> None:
        if self.world_size > 1:  # in-process, a group this worker did not create is left alone
            destroy_process_group()
        self.threads.restore()

    # set-up
    def prepare(self) -> str | None:
        return self.task.prepare()

    def setup(self) -> Plan:
        seed = self.request.seed
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)  # fresh heads and LoRA weights: identical on every replica
        self.model, self.tokenizer = self.task.load_model()
        self.model.to(self.device)
        # Sequence parallelism: groups of `sp` ranks share rows and split their tokens (`engine.runtime.ulysses`).
        self.sp = ulysses.layout(getattr(self.cfg, "ulysses_sequence_parallel_size", 1), self.rank, self.world_size)
        ulysses.enable(self.model, self.sp)
        self.model.train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        if self.world_size > 1:
            import torch.distributed as dist

            for p in self.params:
                dist.broadcast(p.data, src=0)
        train_rows, val_rows = split_rows(self.request, self.task.data_kind)
        self.train = self.task.tokenize(train_rows, "train")
        self.val = self.task.tokenize(val_rows, "val")
        self.plan = make_plan(self.cfg, len(self.train), len(self.val))
        if self.plan.total_steps < 1:
            raise ConfigError("the run has no training steps", param="trainer.total_training_steps")
        self.precision = Precision(self.cfg.model.dtype, self.device)
        self.sharded = self._shard()
        self.optimizer = build_optimizer(self.model, self.cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, self.cfg.optim, self.plan.total_steps)
        self.offload = (sharding.OptimizerOffload(self.optimizer, self.device)
                        if self.sharded is not None and self.cfg.model.fsdp_config.optimizer_offload else None)
        return self.plan

    def _shard(self) -> sharding.Sharded | None:
        """`model.strategy: fsdp2` with several workers: shard the model (`engine.runtime.sharding`)."""
        if self.cfg.model.strategy != "fsdp2" or self.world_size == 1:
            return None
        if hasattr(self.task, "group_overhead"):
            # One forward per micro-batch on every worker: the collectives must line up.
            self.task.group_overhead = 10**12
        sharded = sharding.shard_model(self.model, self.cfg.model.fsdp_config, dtype=self.precision.dtype,
                                       device=self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        return sharded

    # the data of one step
    def step_rows(self, step: int) -> list[int]:
        """Indices into the training examples of global step `step` (1-based), all workers."""
        plan = self.plan
        epoch = plan.epoch_of(step)
        order = epoch_order(plan.n_train, self.request.seed, epoch, self.cfg.data.shuffle)
        start = ((step - 1) % plan.steps_per_epoch) * plan.batch_size
        return order[start:start + plan.batch_size].tolist()

    def micro_batches(self, examples: Sequence[Any]) -> list[list[Any]]:
        if not examples:
            return []
        if self.cfg.use_dynamic_bsz and packing.enabled(self.model):  # packed rows: real tokens count
            groups = packing.budget_batches([self.task.tokens(e) for e in examples], self.cfg.max_token_len_per_gpu)
        elif self.cfg.use_dynamic_bsz:
            lengths = [self.task.length(e) for e in examples]
            budget = max(1, self.cfg.max_token_len_per_gpu // self.task.row_cost)
            groups = data_lib.token_budget_batches(lengths, budget)
        else:
            size = self.cfg.micro_batch_size_per_gpu
            groups = [list(range(i, min(i + size, len(examples)))) for i in range(0, len(examples), size)]
        return [[examples[i] for i in group] for group in groups]

    def _reduce(self, stats: dict[str, float]) -> dict[str, float]:
        keys = self.task.stat_keys
        # On the worker's device: NCCL reduces CUDA tensors only.
        summed = all_reduce_sum(torch.tensor([stats.get(k, 0.0) for k in keys], dtype=torch.float64,
                                             device=self.device))
        return dict(zip(keys, summed.tolist()))

    def _lockstep(self, batches: list[list[Any]]):
        """`(micro-batch, real)`; under fsdp2 padded with fillers to the busiest worker's count."""
        return sharding.lockstep(batches, [self.train[0]], active=self.sharded is not None, device=self.device)

    # training and validation
    def train_step(self, step: int) -> dict[str, float]:
        start = time.perf_counter()
        rows = self.step_rows(step)
        normaliser = sum(self.task.weight(self.train[i]) for i in rows)
        mine = [self.train[i] for i in rows[self.sp.dp_rank::self.sp.dp_size]]
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.zero_grad(set_to_none=True)
        stats = dict.fromkeys(self.task.stat_keys, 0.0)
        for batch, real in self._lockstep(self.micro_batches(mine)):
            with self.precision.autocast():
                loss_sum, batch_stats = self.task.forward(self.model, batch)
            if normaliser > 0:
                # A filler micro-batch (fsdp2 lockstep) runs forward and backward, adding nothing.
                self.precision.backward(loss_sum / normaliser * (self.sp.loss_scale if real else 0.0))
            for k, v in batch_stats.items() if real and self.sp.counts else ():
                stats[k] += v
        for p in self.params:  # a replica without rows still joins the all-reduce
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        all_reduce_grads(self.params)
        grad_norm, stepped, _ = self.precision.step(self.optimizer, self.params, self.cfg.optim.grad_clip)
        skipped = not stepped
        self.scheduler.step()
        stats = self._reduce(stats)
        elapsed = time.perf_counter() - start
        out = self.task.metrics(stats, "train")
        out.update({
            "train/lr": lr,
            "train/grad_norm": grad_norm,
            "perf/tokens_per_s": stats["real_tokens"] / max(elapsed, 1e-9),
            "perf/padding_efficiency": stats["real_tokens"] / max(stats["padded_tokens"], 1.0),
            "timing_s/step": elapsed,
            "perf/model_state_bytes_per_worker": float(sharding.state_bytes(self.model, self.optimizer)),
        })
        if skipped:
            out["train/skipped_step"] = 1.0
        return out

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        if not self.val:
            return {}
        self.model.eval()
        stats = dict.fromkeys(self.task.stat_keys, 0.0)
        try:
            for batch, real in self._lockstep(self.micro_batches(self.val[self.sp.dp_rank::self.sp.dp_size])):
                with self.precision.autocast():
                    _, batch_stats = self.task.forward(self.model, batch)
                for k, v in batch_stats.items() if real and self.sp.counts else ():
                    stats[k] += v
        finally:
            self.model.train()
        return self.task.metrics(self._reduce(stats), "val")

    # state
    def _schedulers(self) -> dict[str, Any]:
        # float16's loss scale is state too (exact resume); other dtypes keep the old layout.
        scaler = {"scaler": self.precision} if self.precision.scaler is not None else {}
        return {"model": self.scheduler, **scaler}

    def save_checkpoint(self, path: str, extra: dict[str, Any]) -> str:
        """Every worker is called: rank 0 writes a `ddp` checkpoint; under fsdp2 all write shards.
        Either way the directory also holds the model as a Hugging Face directory (`HF_EXPORT`),
        written before the COMPLETE marker."""
        if self.sharded is not None:
            def shards(tmp: str) -> None:
                sharding.save_shards(tmp, "model", self.model, self.optimizer)
                self._export(tmp)  # collective: the full weights are gathered to rank 0

            return sharding.save_sharded_checkpoint(
                path, shards, lambda tmp: save_state(tmp, modules={}, schedulers=self._schedulers(), extra=extra),
                self.artifacts)
        if self.rank != 0:
            return path
        # A remote checkpoint is written locally, then uploaded with its COMPLETE marker last.
        with (self.artifacts.writing(path, marker=COMPLETE) if is_remote(path) else atomic_dir(path)) as tmp:
            save_state(tmp, modules={"model": self.model}, optimizers={"model": self.optimizer},
                       schedulers=self._schedulers(), extra=extra)
            self._export(tmp)
        return path

    def _full_model(self) -> nn.Module | None:
        """`sharding.full_model`: the whole trained model at rank 0 (collective under fsdp2)."""
        return sharding.full_model(self.model, self.sharded is not None, self.rank)

    def _export(self, directory: str) -> None:
        """`directory/hf`: the model as it is now, loadable without Keel (`models.save_model`)."""
        model = self._full_model()
        if model is not None:
            models.save_model(model, self.tokenizer, os.path.join(directory, HF_EXPORT), dtype=self.precision.dtype)

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        path = self.artifacts.stage(path)  # a URL: this node's copy
        if self.sharded is not None:
            sharding.load_shards(path, "model", self.model, self.optimizer)
            return load_state(path, modules={}, schedulers=self._schedulers())
        sharding.refuse_shards(path)
        return load_state(path, modules={"model": self.model},
                          optimizers={"model": self.optimizer}, schedulers=self._schedulers())

    def save_output(self, out_dir: str) -> str:
        """Every worker is called (fsdp2 gathers the full weights to rank 0); rank 0 saves."""
        model = self._full_model()
        if model is None:
            return "hf"
        with self.artifacts.writing(out_dir) as local:
            return models.save_model(model, self.tokenizer, local, dtype=self.precision.dtype)


# --- the driver -------------------------------------------------------------------------------------

def _due(step: int, freq: int, total: int) -> bool:
    return step == total or (freq > 0 and step % freq == 0)


def resolve_resume(path: str, store: Artifacts | None = None) -> str:
    """A complete checkpoint directory: `path` itself, or the newest `step_<N>` under it (a local
    directory only: a URL must name the step's directory)."""
    if is_remote(path):
        if (store or Artifacts()).exists(join(path, COMPLETE)):
            return path
        raise CheckpointError(f"{path!r} is not a complete checkpoint", param="resume_from")
    if is_complete(path):
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise CheckpointError(f"{path!r} is neither a complete checkpoint nor a directory holding one",
                              param="resume_from")
    return latest


def run_supervised(request: JobRequest, reporter: Reporter, task_cls: type, *, config_cls: type,
                   model_kind: str, final_check: Callable[[dict[str, float]], None] | None = None,
                   in_process: bool | None = None) -> JobResult:
    """Train `task_cls` as `request` says; see the module docstring for the loop.

    Args:
        config_cls: the config class `request.config` must be.
        model_kind: `JobResult.model_kind`.
        final_check: called with the final metrics before the model is saved (a quality gate).
        in_process: force (True) or forbid (False) the in-process single worker; default: in-process
            exactly when `request.resources.num_workers == 1`.
    """
    if not isinstance(request.config, config_cls):
        raise ConfigError(f"{request.method} needs a {config_cls.__name__}, got {type(request.config).__name__}",
                          param="config")
    cfg = request.config
    check_parallel(cfg, request.resources)
    if reporter.should_stop():
        raise Cancelled("job cancelled before it started")
    if reporter.should_pause():  # nothing trained in this attempt: its resume point stands
        raise Paused("job paused before it started", data={"step": None})
    group = make_group(SupervisedWorker, task_cls, request, resources=request.resources,
                       ray_address=request.ray_address, in_process=in_process)
    try:
        reporter.placement(group.placement())
        note = group.call_rank0("prepare")
        if note:
            reporter.log(note)
        plan: Plan = group.call("setup")[0]
        total = plan.total_steps
        start = 0
        if request.resume_from:
            path = resolve_resume(request.resume_from, for_request(request))
            extra = group.call("load_checkpoint", path)[0]
            if extra.get("method") != request.method:
                raise CheckpointError(f"{path} is a {extra.get('method')} checkpoint, not {request.method}",
                                      param="resume_from")
            if (extra.get("n_train"), extra.get("batch_size")) != (plan.n_train, plan.batch_size):
                reporter.warning("resume_data_changed", "the data or batch size changed since the checkpoint: "
                                 "the resumed data order differs from the original run",
                                 {"checkpoint": extra, "now": dataclasses.asdict(plan)})
            start = int(extra["step"])
            reporter.log(f"resumed from {path} at step {start}")
        reporter.log(f"{request.method}: {plan.n_train} train / {plan.n_val} val examples, "
                     f"{plan.batch_size} per step, {total} steps, {group.size} worker(s)")
        last: dict[str, float] = {}
        saved = start

        def save(step: int) -> None:
            extra = {"step": step, "epoch": plan.epoch_of(step), "batch_in_epoch": (step - 1) % plan.steps_per_epoch + 1,
                     "method": request.method, "seed": request.seed, "total_steps": total,
                     "n_train": plan.n_train, "batch_size": plan.batch_size, "num_workers": group.size}
            path = group.call("save_checkpoint", step_dir(request.checkpoint_dir, step), extra)[0]
            reporter.checkpoint(step, path, last)

        for step in range(start + 1, total + 1):
            if reporter.should_stop():
                raise Cancelled(f"job cancelled before step {step}", data={"step": step})
            if reporter.should_pause():  # at a step boundary: the checkpoint is the resume point
                if step - 1 > saved:
                    save(step - 1)
                raise Paused(f"job paused after step {step - 1}", data={"step": step - 1})
            try:
                reporter.heartbeat(step)  # starts the step watchdog's clock for this step
            except MaxDurationExceeded:  # out of time, at a step boundary: keep what was trained
                if step - 1 > saved:
                    save(step - 1)
                raise
            last = group.call("train_step", step)[0]
            if _due(step, cfg.trainer.test_freq, total):
                last.update(group.call("validate")[0])
            reporter.metrics(step, last, total_steps=total, epoch=plan.epoch_of(step) + 1)  # 1-based, as PPO's
            if _due(step, cfg.trainer.save_freq, total):
                save(step)
                saved = step
        if not last:  # resumed from the final checkpoint: nothing left to train
            last = group.call("validate")[0]
        if final_check is not None:
            final_check(last)
        model_format = group.call("save_output", request.output_dir)[0]
        reporter.log(f"saved the {model_kind} ({model_format}) as the job's output model")
        return JobResult(output_dir=request.output_dir, model_format=model_format, model_kind=model_kind,
                         metrics=dict(last))
    finally:
        group.shutdown()

