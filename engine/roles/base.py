"""What every role worker shares: device and threads, the data-parallel group and its sequence-parallel
layout (`Role`), and the weighted metric sums its phases report (`MetricSums`).

Role classes are plain Python classes: tests build them directly; `engine.roles.remote` wraps each
with `ray.remote` once. Every method that does work returns a dict with its wall time `time_s`, so
the driver can report per-phase timings while all roles run at once. The batched forwards the roles
run are in `engine.roles.forward`; the optimizer step, snapshots and checkpoints of the trained roles
in `engine.roles.trainable`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from engine.runtime import distributed, ulysses
from engine.runtime.artifacts import Artifacts


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
