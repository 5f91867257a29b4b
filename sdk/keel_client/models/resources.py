from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="Resources")


@_attrs_define
class Resources:
    """Where a job runs: data-parallel workers and what each gets.

    Attributes:
        colocate (bool | Unset): PPO: put all roles on one set of resources (else one placement group bundle per role).
            Default: True.
        cpus_per_worker (float | Unset):  Default: 1.0.
        gpus_per_worker (float | Unset):  Default: 0.0.
        num_workers (int | Unset):  Default: 1.
    """

    colocate: bool | Unset = True
    cpus_per_worker: float | Unset = 1.0
    gpus_per_worker: float | Unset = 0.0
    num_workers: int | Unset = 1

    def to_dict(self) -> dict[str, Any]:
        colocate = self.colocate

        cpus_per_worker = self.cpus_per_worker

        gpus_per_worker = self.gpus_per_worker

        num_workers = self.num_workers

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if colocate is not UNSET:
            field_dict["colocate"] = colocate
        if cpus_per_worker is not UNSET:
            field_dict["cpus_per_worker"] = cpus_per_worker
        if gpus_per_worker is not UNSET:
            field_dict["gpus_per_worker"] = gpus_per_worker
        if num_workers is not UNSET:
            field_dict["num_workers"] = num_workers

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        colocate = d.pop("colocate", UNSET)

        cpus_per_worker = d.pop("cpus_per_worker", UNSET)

        gpus_per_worker = d.pop("gpus_per_worker", UNSET)

        num_workers = d.pop("num_workers", UNSET)

        resources = cls(
            colocate=colocate,
            cpus_per_worker=cpus_per_worker,
            gpus_per_worker=gpus_per_worker,
            num_workers=num_workers,
        )

        return resources
