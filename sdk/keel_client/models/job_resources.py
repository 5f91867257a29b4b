from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..models.job_resources_executor import JobResourcesExecutor
from ..models.job_resources_placement import JobResourcesPlacement
from ..types import UNSET, Unset

T = TypeVar("T", bound="JobResources")


@_attrs_define
class JobResources:
    """`Resources` as a job holds them: `cpus_per_worker` is the number `auto` resolved to at creation.

    Attributes:
        colocate (bool | Unset): PPO: put all roles on one set of resources (else one placement group bundle per role).
            Default: True.
        cpus_per_worker (float | Unset): CPUs reserved for each worker (its torch threads follow them). Default: 1.0.
        executor (JobResourcesExecutor | Unset): `ray`: workers are Ray actors (the controller, PPO's roles, data-
            parallel replicas). `local`:
            the job runs in the worker's own process on its one device, without Ray (one worker only). Default:
            JobResourcesExecutor.RAY.
        gpus_per_worker (float | Unset):  Default: 0.0.
        num_workers (int | Unset): Data-parallel workers; 1 with `executor: local`. Default: 1.
        placement (JobResourcesPlacement | Unset): How the workers' bundles go onto nodes: `pack` (as few nodes as fit),
            `spread` (as many as
            possible), `strict_spread` (one node per bundle, or wait). Ray's PACK / SPREAD / STRICT_SPREAD. Default:
            JobResourcesPlacement.PACK.
        rollout_workers (int | Unset): PPO with `rollout.colocate: false`: workers that only generate, each a bundle of
            its own
            (`cpus_per_worker`, `gpus_per_worker`) besides the `num_workers` trainer workers. Default: 0.
    """

    colocate: bool | Unset = True
    cpus_per_worker: float | Unset = 1.0
    executor: JobResourcesExecutor | Unset = JobResourcesExecutor.RAY
    gpus_per_worker: float | Unset = 0.0
    num_workers: int | Unset = 1
    placement: JobResourcesPlacement | Unset = JobResourcesPlacement.PACK
    rollout_workers: int | Unset = 0

    def to_dict(self) -> dict[str, Any]:
        colocate = self.colocate

        cpus_per_worker = self.cpus_per_worker

        executor: str | Unset = UNSET
        if not isinstance(self.executor, Unset):
            executor = self.executor.value

        gpus_per_worker = self.gpus_per_worker

        num_workers = self.num_workers

        placement: str | Unset = UNSET
        if not isinstance(self.placement, Unset):
            placement = self.placement.value

        rollout_workers = self.rollout_workers

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if colocate is not UNSET:
            field_dict["colocate"] = colocate
        if cpus_per_worker is not UNSET:
            field_dict["cpus_per_worker"] = cpus_per_worker
        if executor is not UNSET:
            field_dict["executor"] = executor
        if gpus_per_worker is not UNSET:
            field_dict["gpus_per_worker"] = gpus_per_worker
        if num_workers is not UNSET:
            field_dict["num_workers"] = num_workers
        if placement is not UNSET:
            field_dict["placement"] = placement
        if rollout_workers is not UNSET:
            field_dict["rollout_workers"] = rollout_workers

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        colocate = d.pop("colocate", UNSET)

        cpus_per_worker = d.pop("cpus_per_worker", UNSET)

        _executor = d.pop("executor", UNSET)
        executor: JobResourcesExecutor | Unset
        if isinstance(_executor, Unset):
            executor = UNSET
        else:
            executor = JobResourcesExecutor(_executor)

        gpus_per_worker = d.pop("gpus_per_worker", UNSET)

        num_workers = d.pop("num_workers", UNSET)

        _placement = d.pop("placement", UNSET)
        placement: JobResourcesPlacement | Unset
        if isinstance(_placement, Unset):
            placement = UNSET
        else:
            placement = JobResourcesPlacement(_placement)

        rollout_workers = d.pop("rollout_workers", UNSET)

        job_resources = cls(
            colocate=colocate,
            cpus_per_worker=cpus_per_worker,
            executor=executor,
            gpus_per_worker=gpus_per_worker,
            num_workers=num_workers,
            placement=placement,
            rollout_workers=rollout_workers,
        )

        return job_resources
