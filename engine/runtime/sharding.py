"""FSDP2 sharding (`torch.distributed.fsdp.fully_shard`) for the trained models of data-parallel jobs.

With `strategy: fsdp2` and more than one worker, every worker holds 1/N of the parameters (float32
masters), of the gradients and of the Adam state, as DTensors sharded on dim 0. Units: each decoder
layer, the backbone (embeddings, final norm) and the head (LM head or score head), so that the
engine's direct `backbone(...)` / `head(...)` calls (`engine.models`) all-gather what they use. A
tied head shares its unit with the backbone (under the model as FSDP's root), and checkpoints hold
the tied matrix once, as Hugging Face's export does. One worker, or `ddp`, leaves the model alone.

Collectives must line up across workers: every forward of a unit all-gathers and every backward
reduce-scatters. Two rules keep them in step where workers do unequal work:

- training loops run the same number of micro-batches everywhere (`lockstep`: short workers add
  zero-weight filler micro-batches);
- inference that runs an unpredictable number of forwards (generation, log-probs, values) runs
  inside `gathered`: all units unsharded once, collectively, then forwards with no collectives.

Gradients are summed, not averaged (the engine scales every loss by the global normaliser, as with
`ddp`). With a bf16/fp16 compute dtype the units compute in it (`MixedPrecisionPolicy`) and reduce
in float32; the sharded masters stay float32.

Checkpoints are per-rank shard files (`model.rank<r>.safetensors`, `optim.rank<r>.pt`, read back
with `weights_only=True`) written by every worker into one directory: an atomic directory on a
shared filesystem, or a URL of the remote artifact store that each worker uploads its shards to from
its own node (the COMPLETE marker last, from rank 0); the exported model is gathered to a full state dict and saved by rank 0 as a plain Hugging
Face directory.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from torch import nn

from engine.config import FSDPConfig
from engine.runtime.artifacts import Artifacts, is_remote
from engine.runtime.checkpoint import COMPLETE, CheckpointError, atomic_dir

SHARDS_META = "shards.json"
"""Marks a sharded checkpoint: strategy and world size."""


def _dtensor_cls() -> type:
    from torch.distributed.tensor import DTensor

    return DTensor


def local(t: torch.Tensor) -> torch.Tensor:
    """This worker's part of `t`: the local shard of a DTensor, else `t` itself."""
    return t.to_local() if isinstance(t, _dtensor_cls()) else t


def is_sharded(model: nn.Module) -> bool:
    """True when `model` went through `shard_model` (its parameters are DTensors)."""
    return any(isinstance(p, _dtensor_cls()) for p in model.parameters())


# --- wrapping -----------------------------------------------------------------------------------------

def _layers(model: nn.Module) -> list[nn.Module]:
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if layers:
        return layers
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


class Sharded:
    """The FSDP units of one sharded model (what `gathered` and the offload hooks act on)."""

    def __init__(self, model: nn.Module, units: list[tuple[nn.Module, bool]], offload: bool) -> None:
        self.model = model
        self.units = units
        """`(FSDP module, reshard_after_forward it was given)`, in wrapping order."""
        self.param_offload = offload


def shard_model(model: nn.Module, fsdp: FSDPConfig, *, dtype: torch.dtype, device: torch.device) -> Sharded:
    """Apply FSDP2 to `model` in place over the whole default process group.

    Args:
        fsdp: the offload knobs (`param_offload` -> `CPUOffloadPolicy`).
        dtype: the compute dtype; below float32 it becomes the units' `param_dtype`, gradients
            reduce in float32.
        device: this worker's device (CUDA -> NCCL mesh, CPU -> gloo mesh).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("fsdp2 needs an initialised process group")
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    mp = (MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
          if dtype != torch.float32 else MixedPrecisionPolicy())
    offload = CPUOffloadPolicy(pin_memory=device.type == "cuda") if fsdp.param_offload else OffloadPolicy()
    if not fsdp.param_offload:
        model.to(device)
    common = {"mesh": mesh, "mp_policy": mp, "offload_policy": offload}
    units: list[tuple[nn.Module, bool]] = []

    def wrap(target: nn.Module | list[nn.Module], reshard: bool) -> None:
        fully_shard(target, reshard_after_forward=reshard, **common)
        units.append((target[0] if isinstance(target, list) else target, reshard))

    for layer in _layers(model):
        wrap(layer, True)
    # The engine calls backbone and head directly (not through the root): each is a unit of its own,
    # kept unsharded after forward since backward needs it right away (as FSDP does for a root).
    backbone = getattr(model, getattr(model, "base_model_prefix", ""), None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head = head if head is not None else getattr(model, "score", None)
    covered: set[int] = set()
    tied = False
    if isinstance(backbone, nn.Module) and backbone is not model:
        in_backbone = {id(p) for p in backbone.parameters()}
        tied = head is not None and any(id(p) in in_backbone for p in head.parameters())
        if tied:
            wrap([backbone, head], False)  # tied embeddings: one unit
        else:
            wrap(backbone, False)
            if head is not None and any(True for _ in head.parameters()):
                wrap(head, False)
        covered = {id(p) for m, _ in units for p in m.parameters()}
        covered |= {id(p) for p in head.parameters()} if head is not None else set()
    if tied or any(id(p) not in covered for p in model.parameters()):
        wrap(model, False)
    if tied:
        # A grouped unit (tied backbone and head) cannot be a root: FSDP's lazy init wants a single
        # root module. The model is that root, initialised here since the engine calls the backbone
        # and the head directly, never the model (FSDP has no public call for it).
        model._get_fsdp_state()._lazy_init()
    for module, _ in units:
        # Sum, not average: each worker's loss is already divided by the global normaliser. Plain
        # SUM collectives (gloo has no pre-multiplied sum).
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)
    return Sharded(model, units, fsdp.param_offload)


@contextlib.contextmanager
def gathered(sharded: Sharded | None) -> Iterator[None]:
    """Hold every unit unsharded for the block (collective: every worker enters it, in the same
    order), so that any number of forwards runs without collectives. No-op when not sharded."""
    if sharded is None:
        yield
        return
    for module, _ in sharded.units:
        module.unshard()
        module.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for module, reshard in sharded.units:
            module.reshard()
            module.set_reshard_after_forward(reshard, recurse=False)


def lockstep(items: Sequence[Any], filler: Any, *, active: bool, device: torch.device) -> list[tuple[Any, bool]]:
    """`(item, True)` for each item, then, when `active`, `(filler, False)` until this worker has as
    many as the busiest worker (one all-reduce, before any forward). The caller runs a filler like
    a real micro-batch with its loss multiplied by 0, so every worker runs the same forwards and
    backwards."""
    out = [(item, True) for item in items]
    if not active:
        return out
    count = torch.tensor([len(out)], dtype=torch.int64, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return out + [(filler, False)] * (int(count.item()) - len(out))


# --- memory -------------------------------------------------------------------------------------------

def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> int:
    """Bytes of parameters, gradients and optimizer state this worker holds (local shards only)."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += local(p).nbytes
        if p.grad is not None:
            total += local(p.grad).nbytes
    for state in (optimizer.state.values() if optimizer is not None else ()):
        total += sum(local(v).nbytes for v in state.values() if isinstance(v, torch.Tensor))
    return total


class OptimizerOffload:
    """Keep `optimizer`'s state in host memory between steps: step hooks move it to the device just
    before `step` and back to the host right after (`where`: where it is now; `moves`: how many
    moves so far). On a CPU-only worker both places are the host."""

    def __init__(self, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        self.optimizer, self.device = optimizer, device
        optimizer.register_step_pre_hook(lambda *_: self.move(device))
        optimizer.register_step_post_hook(lambda *_: self.move(torch.device("cpu")))
        self.where = torch.device("cpu")
        self.moves = 0

    def move(self, device: torch.device) -> None:
        for state in self.optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and key != "step":
                    state[key] = value.to(device, non_blocking=device.type == "cuda")
        self.where = device
        self.moves += 1


def tensor_devices(tensors: Sequence[torch.Tensor]) -> set[str]:
    """Device types the local parts of `tensors` live on."""
    return {local(t).device.type for t in tensors}


# --- checkpoints and export ---------------------------------------------------------------------------

def _trained_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The trained state, a tied tensor once (under its first name, as `named_parameters` gives
    it): safetensors refuses two names for one storage, and the head of a tied model is its
    input embedding."""
    named = dict(model.named_parameters(remove_duplicate=False))
    first = dict(model.named_parameters())
    skip = {n for n, p in named.items() if not p.requires_grad or n not in first}
    return {k: v for k, v in model.state_dict().items() if k not in skip}


def save_shards(directory: str, name: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Write this worker's shards of `model` and `optimizer` into `directory` (every worker calls it;
    rank 0 also writes `shards.json`)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    tensors = {k: local(v).detach().to("cpu").contiguous() for k, v in _trained_state(model).items()}
    save_file(tensors, os.path.join(directory, f"{name}.rank{rank}.safetensors"), metadata={"format": "pt"})
    state = local_optimizer_state(optimizer.state_dict())
    state["state"] = {i: {k: v.to("cpu") if isinstance(v, torch.Tensor) else v for k, v in s.items()}
                      for i, s in state["state"].items()}
    torch.save(state, os.path.join(directory, f"{name}.optim.rank{rank}.pt"))
    if rank == 0:
        with open(os.path.join(directory, SHARDS_META), "w") as f:
            json.dump({"strategy": "fsdp2", "world_size": world}, f)


def save_sharded_checkpoint(path: str, write_shards: Callable[[str], None],
                            write_rank0: Callable[[str], None], artifacts: Artifacts | None = None) -> str:
    """Every worker writes its shards into one atomic directory (`engine.runtime.checkpoint.atomic_dir`,
    entered by rank 0, whose temporary name is broadcast); rank 0 also writes the replicated rest
    (schedulers, RNG, loop state) and marks the directory complete once all shards are in.

    A URL `path` (remote artifact storage, `artifacts` given): rank 0 clears it, every worker
    uploads its shards from its own node, then rank 0 adds the rest and the COMPLETE marker last."""
    rank = dist.get_rank()
    if is_remote(path):
        if artifacts is None:
            raise CheckpointError("a remote checkpoint needs the job's artifact store", param="checkpoint_dir")
        if rank == 0:
            artifacts.remove(path, COMPLETE)
        dist.barrier()
        with artifacts.adding(path) as local:
            write_shards(local)
        dist.barrier()  # every shard is uploaded before the marker
        if rank == 0:
            with artifacts.adding(path, marker=COMPLETE) as local:
                write_rank0(local)
        dist.barrier()
        return path
    with atomic_dir(path) if rank == 0 else contextlib.nullcontext() as tmp:
        name = [tmp]
        dist.broadcast_object_list(name, src=0)
        write_shards(name[0])
        if rank == 0:
            write_rank0(name[0])
        dist.barrier()  # every shard is on disk before rank 0 marks the directory complete
    dist.barrier()  # ... and renames it
    return path


def full_model(model: nn.Module, sharded: bool, rank: int) -> nn.Module | None:
    """The whole trained model at rank 0, None elsewhere (collective when `sharded`: the fsdp2 shards
    are gathered to rank 0 into a plain copy)."""
    if sharded:
        state = full_state_dict(model)
        return None if state is None else plain_copy(model, state)
    return model if rank == 0 else None


def is_sharded_checkpoint(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, SHARDS_META))


def refuse_shards(directory: str) -> None:
    """For an unsharded resume: a clear error when `directory` (local, staged) holds fsdp2 shards."""
    if is_sharded_checkpoint(directory):
        with open(os.path.join(directory, SHARDS_META)) as f:
            world = json.load(f)["world_size"]
        raise CheckpointError(f"{directory} holds fsdp2 shards: resume it with {world} workers and strategy fsdp2",
                              param="resume_from")


def load_shards(directory: str, name: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Read back what `save_shards` wrote, into the same sharding (same number of workers)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if not is_sharded_checkpoint(directory):
        raise CheckpointError(f"{directory} is not an fsdp2 checkpoint: resume it with strategy ddp",
                              param="resume_from")
    with open(os.path.join(directory, SHARDS_META)) as f:
        saved_world = json.load(f)["world_size"]
    if saved_world != world:
        raise CheckpointError(f"{directory} holds fsdp2 shards: resume it with {saved_world} workers",
                              param="resume_from")
    tensors = load_file(os.path.join(directory, f"{name}.rank{rank}.safetensors"), device="cpu")
    live = _trained_state(model)
    if set(tensors) != set(live):
        raise CheckpointError(f"the shards in {directory} do not fit the model", param="resume_from")
    with torch.no_grad():
        for key, value in live.items():
            local(value).copy_(tensors[key])
    state = torch.load(os.path.join(directory, f"{name}.optim.rank{rank}.pt"), map_location="cpu",
                       weights_only=True)
    optimizer.load_state_dict(sharded_optimizer_state(optimizer, state))


def local_optimizer_state(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer `state_dict` with this worker's local shards as plain tensors (not copied)."""
    return {**state, "state": {i: {k: local(v).detach() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
                               for i, s in state["state"].items()}}


def sharded_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `local_optimizer_state` for `optimizer`'s (sharded) parameters, in place."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    DTensor = _dtensor_cls()
    for index, entry in state["state"].items():
        param = params[int(index)]
        for key, value in entry.items():
            if isinstance(param, DTensor) and key != "step" and value.dim() > 0:
                entry[key] = DTensor.from_local(value.to(local(param).device), param.device_mesh, param.placements,
                                                run_check=False, shape=param.shape, stride=param.stride())
    return state


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor] | None:
    """The whole state dict on CPU at rank 0 (None elsewhere); collective, one tensor at a time."""
    out: dict[str, torch.Tensor] | None = {} if dist.get_rank() == 0 else None
    for key, value in model.state_dict().items():
        full = value.full_tensor() if isinstance(value, _dtensor_cls()) else value
        if out is not None:
            out[key] = full.detach().to("cpu")
    return out


def plain_copy(model: nn.Module, state: dict[str, torch.Tensor]) -> nn.Module:
    """A new unsharded model of `model`'s original class holding `state` (for `save_pretrained`).
    Built on the meta device, then materialised empty on CPU: no random initialisation."""
    from torch.distributed.fsdp import FSDPModule

    cls = next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule))
    with torch.device("meta"):
        plain = cls(model.config)
    plain.to_empty(device="cpu")
    plain.load_state_dict(state, strict=True)
    return plain
