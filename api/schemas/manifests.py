"""A job's manifest: what its latest attempt ran with (`GET /v1/jobs/{id}/manifest`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.schemas.forks import ForkedFrom


class ManifestFile(BaseModel):
    id: str
    sha256: str | None
    """The sha256 of the file's bytes, as recorded at upload."""
    bytes: int | None = None
    rows: int | None = None


class ManifestDatasets(BaseModel):
    training_file: ManifestFile | None = None
    validation_file: ManifestFile | None = None


class ManifestModel(BaseModel):
    ref: str
    """The model as the job named it (model id, checkpoint id, hub id or directory)."""
    sha256: str | None = None
    """A fingerprint of the model directory's files (`algorithm`): cheap and stable, not a full content
    hash (files over 64 MiB are hashed by size, first and last MiB and 16 slices); null when the node
    loads the model from the hub or a remote store."""
    algorithm: str | None = None


class ManifestGpu(BaseModel):
    name: str
    memory_bytes: int | None = None


class ManifestRay(BaseModel):
    nodes: int
    cpus: float
    gpus: float
    accelerator_types: list[str] = Field(default_factory=list)


class ManifestHardware(BaseModel):
    """The node that ran the job's controller, and the Ray cluster around it."""

    cpu_model: str | None = None
    cpu_count: int | None = None
    cpus_usable: int | None = None
    memory_bytes: int | None = None
    gpus: list[ManifestGpu] = Field(default_factory=list)
    """GPUs the controller's process sees (the training process, for methods that train in it)."""
    ray_nodes: int | None = None
    """Alive Ray nodes when the job started (null: the local executor, without Ray)."""
    ray: ManifestRay | None = None
    platform: str | None = None
    python: str | None = None


class JobManifest(BaseModel):
    """What a job's latest attempt ran with, recorded by the worker when it started."""

    object: Literal["job.manifest"] = "job.manifest"
    job_id: str
    attempt: int | None = None
    recorded_at: int
    """Unix seconds."""
    method: str
    packages: dict[str, str | None]
    """Versions of keel, torch, transformers, peft, vllm and ray on the node (null: not installed)."""
    config: dict[str, Any]
    """The hyperparameters as the engine ran them (every default filled in)."""
    resources: dict[str, Any]
    seeds: dict[str, int]
    """`seed` (the job's) and any seed the hyperparameters set."""
    datasets: ManifestDatasets
    base_model: ManifestModel
    hardware: ManifestHardware
    image_digest: str | None = None
    """The deployment image's digest (the node's `KEEL_IMAGE_DIGEST`), when known."""
    from_checkpoint: str | None = None
    forked_from: ForkedFrom | None = None
