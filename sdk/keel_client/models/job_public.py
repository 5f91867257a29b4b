from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.job_public_queue_reason_type_0 import JobPublicQueueReasonType0
from ..models.job_public_status import JobPublicStatus
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.distill_policy_method import DistillPolicyMethod
    from ..models.dpo_method import DPOMethod
    from ..models.eval_method import EvalMethod
    from ..models.forked_from import ForkedFrom
    from ..models.integration import Integration
    from ..models.job_error import JobError
    from ..models.job_progress import JobProgress
    from ..models.job_public_latest_metrics import JobPublicLatestMetrics
    from ..models.job_public_metadata import JobPublicMetadata
    from ..models.job_resources import JobResources
    from ..models.ppo_method import PPOMethod
    from ..models.reward_model_method import RewardModelMethod
    from ..models.rm_distill_method import RMDistillMethod
    from ..models.sft_method import SFTMethod
    from ..models.worker_placement import WorkerPlacement


T = TypeVar("T", bound="JobPublic")


@_attrs_define
class JobPublic:
    """A job as the API shows it.

    Attributes:
        attempts (int):
        created_at (int):
        error (JobError | None):
        finished_at (int | None):
        from_checkpoint (None | str):
        id (str):
        latest_metrics (JobPublicLatestMetrics):
        metadata (JobPublicMetadata):
        method (DistillPolicyMethod | DPOMethod | EvalMethod | PPOMethod | RewardModelMethod | RMDistillMethod |
            SFTMethod):
        model (str):
        output_model (None | str):
        progress (JobProgress):
        queue_position (int | None):
        resources (JobResources): `Resources` as a job holds them: `cpus_per_worker` is the number `auto` resolved to at
            creation.
        seed (int):
        started_at (int | None):
        status (JobPublicStatus):
        suffix (None | str):
        training_file (str):
        validation_file (None | str):
        created_by (None | str | Unset):
        forked_from (ForkedFrom | None | Unset):
        integrations (list[Integration] | Unset):
        object_ (Literal['job'] | Unset):  Default: 'job'.
        placement (list[WorkerPlacement] | None | Unset):
        queue_reason (JobPublicQueueReasonType0 | None | Unset):
        result_files (list[str] | Unset):
    """

    attempts: int
    created_at: int
    error: JobError | None
    finished_at: int | None
    from_checkpoint: None | str
    id: str
    latest_metrics: JobPublicLatestMetrics
    metadata: JobPublicMetadata
    method: DistillPolicyMethod | DPOMethod | EvalMethod | PPOMethod | RewardModelMethod | RMDistillMethod | SFTMethod
    model: str
    output_model: None | str
    progress: JobProgress
    queue_position: int | None
    resources: JobResources
    seed: int
    started_at: int | None
    status: JobPublicStatus
    suffix: None | str
    training_file: str
    validation_file: None | str
    created_by: None | str | Unset = UNSET
    forked_from: ForkedFrom | None | Unset = UNSET
    integrations: list[Integration] | Unset = UNSET
    object_: Literal["job"] | Unset = "job"
    placement: list[WorkerPlacement] | None | Unset = UNSET
    queue_reason: JobPublicQueueReasonType0 | None | Unset = UNSET
    result_files: list[str] | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.distill_policy_method import DistillPolicyMethod  # noqa: PLC0415
        from ..models.dpo_method import DPOMethod  # noqa: PLC0415
        from ..models.forked_from import ForkedFrom  # noqa: PLC0415
        from ..models.job_error import JobError  # noqa: PLC0415
        from ..models.ppo_method import PPOMethod  # noqa: PLC0415
        from ..models.reward_model_method import RewardModelMethod  # noqa: PLC0415
        from ..models.rm_distill_method import RMDistillMethod  # noqa: PLC0415
        from ..models.sft_method import SFTMethod  # noqa: PLC0415

        attempts = self.attempts

        created_at = self.created_at

        error: dict[str, Any] | None
        if isinstance(self.error, JobError):
            error = self.error.to_dict()
        else:
            error = self.error

        finished_at: int | None
        finished_at = self.finished_at

        from_checkpoint: None | str
        from_checkpoint = self.from_checkpoint

        id = self.id

        latest_metrics = self.latest_metrics.to_dict()

        metadata = self.metadata.to_dict()

        method: dict[str, Any]
        if isinstance(self.method, SFTMethod):
            method = self.method.to_dict()
        elif isinstance(self.method, RewardModelMethod):
            method = self.method.to_dict()
        elif isinstance(self.method, RMDistillMethod):
            method = self.method.to_dict()
        elif isinstance(self.method, DPOMethod):
            method = self.method.to_dict()
        elif isinstance(self.method, PPOMethod):
            method = self.method.to_dict()
        elif isinstance(self.method, DistillPolicyMethod):
            method = self.method.to_dict()
        else:
            method = self.method.to_dict()

        model = self.model

        output_model: None | str
        output_model = self.output_model

        progress = self.progress.to_dict()

        queue_position: int | None
        queue_position = self.queue_position

        resources = self.resources.to_dict()

        seed = self.seed

        started_at: int | None
        started_at = self.started_at

        status = self.status.value

        suffix: None | str
        suffix = self.suffix

        training_file = self.training_file

        validation_file: None | str
        validation_file = self.validation_file

        created_by: None | str | Unset
        if isinstance(self.created_by, Unset):
            created_by = UNSET
        else:
            created_by = self.created_by

        forked_from: dict[str, Any] | None | Unset
        if isinstance(self.forked_from, Unset):
            forked_from = UNSET
        elif isinstance(self.forked_from, ForkedFrom):
            forked_from = self.forked_from.to_dict()
        else:
            forked_from = self.forked_from

        integrations: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.integrations, Unset):
            integrations = []
            for integrations_item_data in self.integrations:
                integrations_item = integrations_item_data.to_dict()
                integrations.append(integrations_item)

        object_ = self.object_

        placement: list[dict[str, Any]] | None | Unset
        if isinstance(self.placement, Unset):
            placement = UNSET
        elif isinstance(self.placement, list):
            placement = []
            for placement_type_0_item_data in self.placement:
                placement_type_0_item = placement_type_0_item_data.to_dict()
                placement.append(placement_type_0_item)

        else:
            placement = self.placement

        queue_reason: None | str | Unset
        if isinstance(self.queue_reason, Unset):
            queue_reason = UNSET
        elif isinstance(self.queue_reason, JobPublicQueueReasonType0):
            queue_reason = self.queue_reason.value
        else:
            queue_reason = self.queue_reason

        result_files: list[str] | Unset = UNSET
        if not isinstance(self.result_files, Unset):
            result_files = self.result_files

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "attempts": attempts,
                "created_at": created_at,
                "error": error,
                "finished_at": finished_at,
                "from_checkpoint": from_checkpoint,
                "id": id,
                "latest_metrics": latest_metrics,
                "metadata": metadata,
                "method": method,
                "model": model,
                "output_model": output_model,
                "progress": progress,
                "queue_position": queue_position,
                "resources": resources,
                "seed": seed,
                "started_at": started_at,
                "status": status,
                "suffix": suffix,
                "training_file": training_file,
                "validation_file": validation_file,
            }
        )
        if created_by is not UNSET:
            field_dict["created_by"] = created_by
        if forked_from is not UNSET:
            field_dict["forked_from"] = forked_from
        if integrations is not UNSET:
            field_dict["integrations"] = integrations
        if object_ is not UNSET:
            field_dict["object"] = object_
        if placement is not UNSET:
            field_dict["placement"] = placement
        if queue_reason is not UNSET:
            field_dict["queue_reason"] = queue_reason
        if result_files is not UNSET:
            field_dict["result_files"] = result_files

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.distill_policy_method import DistillPolicyMethod  # noqa: PLC0415
        from ..models.dpo_method import DPOMethod  # noqa: PLC0415
        from ..models.eval_method import EvalMethod  # noqa: PLC0415
        from ..models.forked_from import ForkedFrom  # noqa: PLC0415
        from ..models.integration import Integration  # noqa: PLC0415
        from ..models.job_error import JobError  # noqa: PLC0415
        from ..models.job_progress import JobProgress  # noqa: PLC0415
        from ..models.job_public_latest_metrics import JobPublicLatestMetrics  # noqa: PLC0415
        from ..models.job_public_metadata import JobPublicMetadata  # noqa: PLC0415
        from ..models.job_resources import JobResources  # noqa: PLC0415
        from ..models.ppo_method import PPOMethod  # noqa: PLC0415
        from ..models.reward_model_method import RewardModelMethod  # noqa: PLC0415
        from ..models.rm_distill_method import RMDistillMethod  # noqa: PLC0415
        from ..models.sft_method import SFTMethod  # noqa: PLC0415
        from ..models.worker_placement import WorkerPlacement  # noqa: PLC0415

        d = dict(src_dict)
        attempts = d.pop("attempts")

        created_at = d.pop("created_at")

        def _parse_error(data: object) -> JobError | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                error_type_0 = JobError.from_dict(data)

                return error_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(JobError | None, data)

        error = _parse_error(d.pop("error"))

        def _parse_finished_at(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        finished_at = _parse_finished_at(d.pop("finished_at"))

        def _parse_from_checkpoint(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        from_checkpoint = _parse_from_checkpoint(d.pop("from_checkpoint"))

        id = d.pop("id")

        latest_metrics = JobPublicLatestMetrics.from_dict(d.pop("latest_metrics"))

        metadata = JobPublicMetadata.from_dict(d.pop("metadata"))

        def _parse_method(
            data: object,
        ) -> DistillPolicyMethod | DPOMethod | EvalMethod | PPOMethod | RewardModelMethod | RMDistillMethod | SFTMethod:
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                method_type_0 = SFTMethod.from_dict(data)

                return method_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                method_type_1 = RewardModelMethod.from_dict(data)

                return method_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                method_type_2 = RMDistillMethod.from_dict(data)

                return method_type_2
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                method_type_3 = DPOMethod.from_dict(data)

                return method_type_3
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                method_type_4 = PPOMethod.from_dict(data)

                return method_type_4
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                method_type_5 = DistillPolicyMethod.from_dict(data)

                return method_type_5
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            if not isinstance(data, dict):
                raise TypeError()
            method_type_6 = EvalMethod.from_dict(data)

            return method_type_6

        method = _parse_method(d.pop("method"))

        model = d.pop("model")

        def _parse_output_model(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        output_model = _parse_output_model(d.pop("output_model"))

        progress = JobProgress.from_dict(d.pop("progress"))

        def _parse_queue_position(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        queue_position = _parse_queue_position(d.pop("queue_position"))

        resources = JobResources.from_dict(d.pop("resources"))

        seed = d.pop("seed")

        def _parse_started_at(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        started_at = _parse_started_at(d.pop("started_at"))

        status = JobPublicStatus(d.pop("status"))

        def _parse_suffix(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        suffix = _parse_suffix(d.pop("suffix"))

        training_file = d.pop("training_file")

        def _parse_validation_file(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        validation_file = _parse_validation_file(d.pop("validation_file"))

        def _parse_created_by(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        created_by = _parse_created_by(d.pop("created_by", UNSET))

        def _parse_forked_from(data: object) -> ForkedFrom | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                forked_from_type_0 = ForkedFrom.from_dict(data)

                return forked_from_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(ForkedFrom | None | Unset, data)

        forked_from = _parse_forked_from(d.pop("forked_from", UNSET))

        _integrations = d.pop("integrations", UNSET)
        integrations: list[Integration] | Unset = UNSET
        if _integrations is not UNSET:
            integrations = []
            for integrations_item_data in _integrations:
                integrations_item = Integration.from_dict(integrations_item_data)

                integrations.append(integrations_item)

        object_ = cast(Literal["job"] | Unset, d.pop("object", UNSET))
        if object_ != "job" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'job', got '{object_}'")

        def _parse_placement(data: object) -> list[WorkerPlacement] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                placement_type_0 = []
                _placement_type_0 = data
                for placement_type_0_item_data in _placement_type_0:
                    placement_type_0_item = WorkerPlacement.from_dict(placement_type_0_item_data)

                    placement_type_0.append(placement_type_0_item)

                return placement_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[WorkerPlacement] | None | Unset, data)

        placement = _parse_placement(d.pop("placement", UNSET))

        def _parse_queue_reason(data: object) -> JobPublicQueueReasonType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                queue_reason_type_0 = JobPublicQueueReasonType0(data)

                return queue_reason_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(JobPublicQueueReasonType0 | None | Unset, data)

        queue_reason = _parse_queue_reason(d.pop("queue_reason", UNSET))

        result_files = cast(list[str], d.pop("result_files", UNSET))

        job_public = cls(
            attempts=attempts,
            created_at=created_at,
            error=error,
            finished_at=finished_at,
            from_checkpoint=from_checkpoint,
            id=id,
            latest_metrics=latest_metrics,
            metadata=metadata,
            method=method,
            model=model,
            output_model=output_model,
            progress=progress,
            queue_position=queue_position,
            resources=resources,
            seed=seed,
            started_at=started_at,
            status=status,
            suffix=suffix,
            training_file=training_file,
            validation_file=validation_file,
            created_by=created_by,
            forked_from=forked_from,
            integrations=integrations,
            object_=object_,
            placement=placement,
            queue_reason=queue_reason,
            result_files=result_files,
        )

        job_public.additional_properties = d
        return job_public

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
