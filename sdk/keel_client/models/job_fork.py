from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.job_fork_hyperparameters_type_0 import JobForkHyperparametersType0


T = TypeVar("T", bound="JobFork")


@_attrs_define
class JobFork:
    """Start a new job from a checkpoint of this one: its weights, optimizer state and data position, as
    a resume would. The new job runs the parent's request (model, files, method, seed, resources).

        Attributes:
            checkpoint (int | str): A checkpoint of this job: its id (`ckpt-...`) or its step.
            hyperparameters (JobForkHyperparametersType0 | None | Unset): A partial hyperparameters object of the job's
                method, merged over the parent's (nested objects
                key by key). Left out: the fork's steps after the checkpoint equal the parent's (on CPU, bitwise).
    """

    checkpoint: int | str
    hyperparameters: JobForkHyperparametersType0 | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.job_fork_hyperparameters_type_0 import JobForkHyperparametersType0  # noqa: PLC0415

        checkpoint: int | str
        checkpoint = self.checkpoint

        hyperparameters: dict[str, Any] | None | Unset
        if isinstance(self.hyperparameters, Unset):
            hyperparameters = UNSET
        elif isinstance(self.hyperparameters, JobForkHyperparametersType0):
            hyperparameters = self.hyperparameters.to_dict()
        else:
            hyperparameters = self.hyperparameters

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "checkpoint": checkpoint,
            }
        )
        if hyperparameters is not UNSET:
            field_dict["hyperparameters"] = hyperparameters

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.job_fork_hyperparameters_type_0 import JobForkHyperparametersType0  # noqa: PLC0415

        d = dict(src_dict)

        def _parse_checkpoint(data: object) -> int | str:
            return cast(int | str, data)

        checkpoint = _parse_checkpoint(d.pop("checkpoint"))

        def _parse_hyperparameters(data: object) -> JobForkHyperparametersType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                hyperparameters_type_0 = JobForkHyperparametersType0.from_dict(data)

                return hyperparameters_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(JobForkHyperparametersType0 | None | Unset, data)

        hyperparameters = _parse_hyperparameters(d.pop("hyperparameters", UNSET))

        job_fork = cls(
            checkpoint=checkpoint,
            hyperparameters=hyperparameters,
        )

        return job_fork
