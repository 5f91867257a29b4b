from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.fine_tuning_job_status import FineTuningJobStatus
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.fine_tuning_error import FineTuningError
    from ..models.fine_tuning_job_hyperparameters import FineTuningJobHyperparameters
    from ..models.fine_tuning_job_integrations_type_0_item import FineTuningJobIntegrationsType0Item
    from ..models.fine_tuning_job_metadata_type_0 import FineTuningJobMetadataType0
    from ..models.fine_tuning_job_method import FineTuningJobMethod


T = TypeVar("T", bound="FineTuningJob")


@_attrs_define
class FineTuningJob:
    """OpenAI's `fine_tuning.job`, over the same row as Keel's job of the same id.

    Attributes:
        created_at (int):
        error (FineTuningError | None):
        estimated_finish (int | None):
        fine_tuned_model (None | str):
        finished_at (int | None):
        hyperparameters (FineTuningJobHyperparameters):
        id (str):
        integrations (list[FineTuningJobIntegrationsType0Item] | None):
        keel_job (str):
        metadata (FineTuningJobMetadataType0 | None):
        method (FineTuningJobMethod):
        model (str):
        organization_id (str):
        result_files (list[str]):
        seed (int):
        status (FineTuningJobStatus):
        trained_tokens (int | None):
        training_file (str):
        validation_file (None | str):
        object_ (Literal['fine_tuning.job'] | Unset):  Default: 'fine_tuning.job'.
        suffix (None | str | Unset):
    """

    created_at: int
    error: FineTuningError | None
    estimated_finish: int | None
    fine_tuned_model: None | str
    finished_at: int | None
    hyperparameters: FineTuningJobHyperparameters
    id: str
    integrations: list[FineTuningJobIntegrationsType0Item] | None
    keel_job: str
    metadata: FineTuningJobMetadataType0 | None
    method: FineTuningJobMethod
    model: str
    organization_id: str
    result_files: list[str]
    seed: int
    status: FineTuningJobStatus
    trained_tokens: int | None
    training_file: str
    validation_file: None | str
    object_: Literal["fine_tuning.job"] | Unset = "fine_tuning.job"
    suffix: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.fine_tuning_error import FineTuningError  # noqa: PLC0415
        from ..models.fine_tuning_job_metadata_type_0 import FineTuningJobMetadataType0  # noqa: PLC0415

        created_at = self.created_at

        error: dict[str, Any] | None
        if isinstance(self.error, FineTuningError):
            error = self.error.to_dict()
        else:
            error = self.error

        estimated_finish: int | None
        estimated_finish = self.estimated_finish

        fine_tuned_model: None | str
        fine_tuned_model = self.fine_tuned_model

        finished_at: int | None
        finished_at = self.finished_at

        hyperparameters = self.hyperparameters.to_dict()

        id = self.id

        integrations: list[dict[str, Any]] | None
        if isinstance(self.integrations, list):
            integrations = []
            for integrations_type_0_item_data in self.integrations:
                integrations_type_0_item = integrations_type_0_item_data.to_dict()
                integrations.append(integrations_type_0_item)

        else:
            integrations = self.integrations

        keel_job = self.keel_job

        metadata: dict[str, Any] | None
        if isinstance(self.metadata, FineTuningJobMetadataType0):
            metadata = self.metadata.to_dict()
        else:
            metadata = self.metadata

        method = self.method.to_dict()

        model = self.model

        organization_id = self.organization_id

        result_files = self.result_files

        seed = self.seed

        status = self.status.value

        trained_tokens: int | None
        trained_tokens = self.trained_tokens

        training_file = self.training_file

        validation_file: None | str
        validation_file = self.validation_file

        object_ = self.object_

        suffix: None | str | Unset
        if isinstance(self.suffix, Unset):
            suffix = UNSET
        else:
            suffix = self.suffix

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created_at": created_at,
                "error": error,
                "estimated_finish": estimated_finish,
                "fine_tuned_model": fine_tuned_model,
                "finished_at": finished_at,
                "hyperparameters": hyperparameters,
                "id": id,
                "integrations": integrations,
                "keel_job": keel_job,
                "metadata": metadata,
                "method": method,
                "model": model,
                "organization_id": organization_id,
                "result_files": result_files,
                "seed": seed,
                "status": status,
                "trained_tokens": trained_tokens,
                "training_file": training_file,
                "validation_file": validation_file,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_
        if suffix is not UNSET:
            field_dict["suffix"] = suffix

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.fine_tuning_error import FineTuningError  # noqa: PLC0415
        from ..models.fine_tuning_job_hyperparameters import FineTuningJobHyperparameters  # noqa: PLC0415
        from ..models.fine_tuning_job_integrations_type_0_item import FineTuningJobIntegrationsType0Item  # noqa: PLC0415
        from ..models.fine_tuning_job_metadata_type_0 import FineTuningJobMetadataType0  # noqa: PLC0415
        from ..models.fine_tuning_job_method import FineTuningJobMethod  # noqa: PLC0415

        d = dict(src_dict)
        created_at = d.pop("created_at")

        def _parse_error(data: object) -> FineTuningError | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                error_type_0 = FineTuningError.from_dict(data)

                return error_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(FineTuningError | None, data)

        error = _parse_error(d.pop("error"))

        def _parse_estimated_finish(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        estimated_finish = _parse_estimated_finish(d.pop("estimated_finish"))

        def _parse_fine_tuned_model(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        fine_tuned_model = _parse_fine_tuned_model(d.pop("fine_tuned_model"))

        def _parse_finished_at(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        finished_at = _parse_finished_at(d.pop("finished_at"))

        hyperparameters = FineTuningJobHyperparameters.from_dict(d.pop("hyperparameters"))

        id = d.pop("id")

        def _parse_integrations(data: object) -> list[FineTuningJobIntegrationsType0Item] | None:
            if data is None:
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                integrations_type_0 = []
                _integrations_type_0 = data
                for integrations_type_0_item_data in _integrations_type_0:
                    integrations_type_0_item = FineTuningJobIntegrationsType0Item.from_dict(
                        integrations_type_0_item_data
                    )

                    integrations_type_0.append(integrations_type_0_item)

                return integrations_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[FineTuningJobIntegrationsType0Item] | None, data)

        integrations = _parse_integrations(d.pop("integrations"))

        keel_job = d.pop("keel_job")

        def _parse_metadata(data: object) -> FineTuningJobMetadataType0 | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                metadata_type_0 = FineTuningJobMetadataType0.from_dict(data)

                return metadata_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(FineTuningJobMetadataType0 | None, data)

        metadata = _parse_metadata(d.pop("metadata"))

        method = FineTuningJobMethod.from_dict(d.pop("method"))

        model = d.pop("model")

        organization_id = d.pop("organization_id")

        result_files = cast(list[str], d.pop("result_files"))

        seed = d.pop("seed")

        status = FineTuningJobStatus(d.pop("status"))

        def _parse_trained_tokens(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        trained_tokens = _parse_trained_tokens(d.pop("trained_tokens"))

        training_file = d.pop("training_file")

        def _parse_validation_file(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        validation_file = _parse_validation_file(d.pop("validation_file"))

        object_ = cast(Literal["fine_tuning.job"] | Unset, d.pop("object", UNSET))
        if object_ != "fine_tuning.job" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'fine_tuning.job', got '{object_}'")

        def _parse_suffix(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        suffix = _parse_suffix(d.pop("suffix", UNSET))

        fine_tuning_job = cls(
            created_at=created_at,
            error=error,
            estimated_finish=estimated_finish,
            fine_tuned_model=fine_tuned_model,
            finished_at=finished_at,
            hyperparameters=hyperparameters,
            id=id,
            integrations=integrations,
            keel_job=keel_job,
            metadata=metadata,
            method=method,
            model=model,
            organization_id=organization_id,
            result_files=result_files,
            seed=seed,
            status=status,
            trained_tokens=trained_tokens,
            training_file=training_file,
            validation_file=validation_file,
            object_=object_,
            suffix=suffix,
        )

        fine_tuning_job.additional_properties = d
        return fine_tuning_job

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
