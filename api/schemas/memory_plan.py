"""The memory plan a dry-run create returns (`POST /v1/jobs?dry_run=true`), and `will_not_fit` carries."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class RoleMemory(BaseModel):
    """Estimated bytes of one model on one worker (device bytes, and `host_bytes` kept in host memory)."""

    parameters: int
    trainable_parameters: int
    """LoRA: the adapters (and a reward/value head); 0 for a frozen model."""
    weights_bytes: int
    """Float32 master weights of a trained model (plus autocast's compute-dtype copy with a 16-bit
    `model.dtype`); frozen models and a LoRA base in the compute dtype; FSDP2: this worker's shard plus
    the layers gathered at a time."""
    gradients_bytes: int
    optimizer_bytes: int
    """AdamW's two float32 moments per trainable parameter (this worker's shard under FSDP2)."""
    activations_bytes: int
    """The peak of the largest micro-batch (or, for the PPO actor, generation's KV cache if larger)."""
    total_bytes: int
    """weights + gradients + optimizer + activations: what the device must hold."""
    host_bytes: int
    """Offloaded state (`fsdp_config`) and PPO's rollback snapshot, in host memory."""


class WorkerMemory(RoleMemory):
    """One worker: its roles added up (activations: the largest, the roles run one after another)."""

    allocator_bytes: int
    """CPU workers: memory the allocator keeps after freeing activations (about half the activation
    peak, measured); included in `total_bytes`. 0 on GPU workers (see `runtime_bytes`)."""
    runtime_bytes: int
    """The process itself: CUDA context and allocator slack on a GPU, the Python runtime on a CPU."""
    required_bytes: int
    """What is compared with the capacity: total + runtime (+ host bytes on a CPU worker)."""


class MemoryCapacity(BaseModel):
    gpu_bytes: int | None
    """One GPU's memory (`KEEL_GPU_MEMORY_BYTES`); null: not configured."""
    host_bytes: int | None
    """A worker's host memory (`KEEL_WORKER_MEMORY_BYTES`); null: not configured."""


class MemoryPlan(BaseModel):
    """Estimated memory per worker of a job that was validated but not created."""

    object: Literal["memory_plan"] = "memory_plan"
    method: str
    device: Literal["cpu", "gpu"]
    num_workers: int
    colocated: bool
    """PPO: all roles share each worker's process and device."""
    per_worker: WorkerMemory | None
    """Null when the model's config.json cannot be read by the API (a hub id, a remote store)."""
    roles: dict[str, RoleMemory]
    """`trainer` (and `teacher`) for supervised methods; `actor`, `critic`, `reference`, `reward` for PPO."""
    capacity: MemoryCapacity
    fits: bool | None
    """Null when the capacity or the model is unknown; a create whose plan says false is a 422 `will_not_fit`."""
    param: str | None
    """When it does not fit: the field most worth changing."""
    detail: str
