"""What an interactive trainer is: the model it holds and where it runs. Pure Python (no torch, no
Ray), so a caller can build one without loading either."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

ACTOR_PREFIX = "keel-trainer-"
NAMESPACE = "keel"


@dataclass(frozen=True)
class SessionSpec:
    """One trainer session (the API's trainer row, resolved).

    Args:
        session_id: the trainer id; the Ray actor is named `keel-trainer-<session_id>`.
        model_path: the base model (a local directory, a URL of the artifact store, or a hub id),
            resolved as `JobRequest.model_path` is for jobs.
        lora_rank: 0 trains every weight; > 0 trains a fresh LoRA adapter of this rank.
        lora_alpha, target_modules: the adapter's scaling numerator and the modules that get one.
        seed: seeds the adapter's initialisation and every sample drawn without an explicit seed.
        dtype: compute dtype (`float32`, `bfloat16`, `float16`); trained weights and the optimizer
            state stay float32 (`engine.runtime.precision`).
        num_cpus, num_gpus: what the actor reserves.
        state_root: where `save_state` / `save_weights_for_sampler` write (a directory, or a URL of
            the artifact store); states may only be loaded from under it or an allowed root.
        storage_options: fsspec options of the remote store behind any URL above.
        allowed_roots: model roots a local model or state may come from (as `JobRequest.allowed_model_roots`).
        ray_address: the cluster to join (None: a private local Ray).
        artifact_cache_dir: the node-local staging directory (`engine.runtime.artifacts`).
    """

    session_id: str
    model_path: str
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: str | tuple[str, ...] = "all-linear"
    seed: int = 0
    dtype: str = "float32"
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    state_root: str = ""
    storage_options: dict[str, Any] | None = None
    allowed_roots: tuple[str, ...] = ()
    ray_address: str | None = None
    artifact_cache_dir: str | None = None


def actor_name(session_id: str) -> str:
    return f"{ACTOR_PREFIX}{session_id}"


HOST_PREFIX = "keel-lora-"


def shares_base(spec: SessionSpec) -> bool:
    """Whether the trainer lives in a shared LoRA host (`engine.interactive.lora_host`): every LoRA
    trainer does; a full-parameter trainer keeps an actor of its own."""
    return spec.lora_rank > 0


def host_name(spec: SessionSpec) -> str:
    """The shared host of a LoRA trainer: one per base model, compute dtype and device kind (trainers
    that differ in these cannot share base tensors)."""
    key = "\0".join((spec.model_path, spec.dtype, "gpu" if spec.num_gpus > 0 else "cpu"))
    return HOST_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:16]
