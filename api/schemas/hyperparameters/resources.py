"""Where a job runs (`resources`): workers, CPUs and GPUs each gets, placement and executor; kept beside
the method hyperparameters though it is a job field of its own."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from api.schemas.hyperparameters.fields import CpusPerWorker, Strict, errors_at


class Resources(Strict):
    """Where a job runs: data-parallel workers and what each gets."""

    num_workers: Annotated[int, Field(gt=0, le=1024)] = 1
    """Data-parallel workers; 1 with `executor: local`."""
    cpus_per_worker: CpusPerWorker = "auto"
    """CPUs reserved for each worker; its torch threads follow them. `auto` is resolved when the job is
    created and the job holds the number: for a CPU-only job the most whole CPUs per worker, up to the
    deployment's `KEEL_AUTO_CPUS_PER_WORKER_MAX` (16), with which the job fits the whole cluster (and
    `KEEL_MAX_JOB_CPUS`); 1 for a job with GPUs, or while no worker has published the cluster's capacity."""
    gpus_per_worker: Annotated[float, Field(ge=0.0, le=64.0)] = 0.0
    colocate: bool = True
    """PPO: put all roles on one set of resources (else one placement group bundle per role)."""
    placement: Literal["pack", "spread", "strict_spread"] = "pack"
    """How the workers' bundles go onto nodes: `pack` (as few nodes as fit), `spread` (as many as
    possible), `strict_spread` (one node per bundle, or wait). Ray's PACK / SPREAD / STRICT_SPREAD."""
    executor: Literal["local", "ray"] = "ray"
    """`ray`: workers are Ray actors (the controller, PPO's roles, data-parallel replicas). `local`:
    the job runs in the worker's own process on its one device, without Ray (one worker only)."""
    rollout_workers: Annotated[int, Field(ge=0, le=1024)] = 0
    """PPO with `rollout.colocate: false`: workers that only generate, each a bundle of its own
    (`cpus_per_worker`, `gpus_per_worker`) besides the `num_workers` trainer workers."""

    @model_validator(mode="after")
    def _local_is_one_worker(self):
        if self.executor == "local" and self.num_workers != 1:
            raise errors_at("Resources", (("num_workers",), self.num_workers,
                                          "resources.executor 'local' runs one worker: num_workers must be 1"))
        return self


class JobResources(Resources):
    """`Resources` as a job holds them: `cpus_per_worker` is the number `auto` resolved to at creation."""

    cpus_per_worker: Annotated[float, Field(gt=0.0, le=1024.0)] = 1.0
    """CPUs reserved for each worker (its torch threads follow them)."""
