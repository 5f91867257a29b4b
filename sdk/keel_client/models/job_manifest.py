from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.forked_from import ForkedFrom
    from ..models.job_manifest_config import JobManifestConfig
    from ..models.job_manifest_packages import JobManifestPackages
    from ..models.job_manifest_resources import JobManifestResources
    from ..models.job_manifest_seeds import JobManifestSeeds
    from ..models.manifest_datasets import ManifestDatasets
    from ..models.manifest_hardware import ManifestHardware
    from ..models.manifest_model import ManifestModel


T = TypeVar("T", bound="JobManifest")


@_attrs_define
class JobManifest:
    """What a job's latest attempt ran with, recorded by the worker when it started.

    Attributes:
        base_model (ManifestModel):
        config (JobManifestConfig):
        datasets (ManifestDatasets):
        hardware (ManifestHardware): The node that ran the job's controller, and the Ray cluster around it.
        job_id (str):
        method (str):
        packages (JobManifestPackages):
        recorded_at (int):
        resources (JobManifestResources):
        seeds (JobManifestSeeds):
        attempt (int | None | Unset):
        forked_from (ForkedFrom | None | Unset):
        from_checkpoint (None | str | Unset):
        image_digest (None | str | Unset):
        object_ (Literal['job.manifest'] | Unset):  Default: 'job.manifest'.
    """

    base_model: ManifestModel
    config: JobManifestConfig
    datasets: ManifestDatasets
    hardware: ManifestHardware
    job_id: str
    method: str
    packages: JobManifestPackages
    recorded_at: int
    resources: JobManifestResources
    seeds: JobManifestSeeds
    attempt: int | None | Unset = UNSET
    forked_from: ForkedFrom | None | Unset = UNSET
    from_checkpoint: None | str | Unset = UNSET
    image_digest: None | str | Unset = UNSET
    object_: Literal["job.manifest"] | Unset = "job.manifest"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.forked_from import ForkedFrom  # noqa: PLC0415

        base_model = self.base_model.to_dict()

        config = self.config.to_dict()

        datasets = self.datasets.to_dict()

        hardware = self.hardware.to_dict()

        job_id = self.job_id

        method = self.method

        packages = self.packages.to_dict()

        recorded_at = self.recorded_at

        resources = self.resources.to_dict()

        seeds = self.seeds.to_dict()

        attempt: int | None | Unset
        if isinstance(self.attempt, Unset):
            attempt = UNSET
        else:
            attempt = self.attempt

        forked_from: dict[str, Any] | None | Unset
        if isinstance(self.forked_from, Unset):
            forked_from = UNSET
        elif isinstance(self.forked_from, ForkedFrom):
            forked_from = self.forked_from.to_dict()
        else:
            forked_from = self.forked_from

        from_checkpoint: None | str | Unset
        if isinstance(self.from_checkpoint, Unset):
            from_checkpoint = UNSET
        else:
            from_checkpoint = self.from_checkpoint

        image_digest: None | str | Unset
        if isinstance(self.image_digest, Unset):
            image_digest = UNSET
        else:
            image_digest = self.image_digest

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "base_model": base_model,
                "config": config,
                "datasets": datasets,
                "hardware": hardware,
                "job_id": job_id,
                "method": method,
                "packages": packages,
                "recorded_at": recorded_at,
                "resources": resources,
                "seeds": seeds,
            }
        )
        if attempt is not UNSET:
            field_dict["attempt"] = attempt
        if forked_from is not UNSET:
            field_dict["forked_from"] = forked_from
        if from_checkpoint is not UNSET:
            field_dict["from_checkpoint"] = from_checkpoint
        if image_digest is not UNSET:
            field_dict["image_digest"] = image_digest
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.forked_from import ForkedFrom  # noqa: PLC0415
        from ..models.job_manifest_config import JobManifestConfig  # noqa: PLC0415
        from ..models.job_manifest_packages import JobManifestPackages  # noqa: PLC0415
        from ..models.job_manifest_resources import JobManifestResources  # noqa: PLC0415
        from ..models.job_manifest_seeds import JobManifestSeeds  # noqa: PLC0415
        from ..models.manifest_datasets import ManifestDatasets  # noqa: PLC0415
        from ..models.manifest_hardware import ManifestHardware  # noqa: PLC0415
        from ..models.manifest_model import ManifestModel  # noqa: PLC0415

        d = dict(src_dict)
        base_model = ManifestModel.from_dict(d.pop("base_model"))

        config = JobManifestConfig.from_dict(d.pop("config"))

        datasets = ManifestDatasets.from_dict(d.pop("datasets"))

        hardware = ManifestHardware.from_dict(d.pop("hardware"))

        job_id = d.pop("job_id")

        method = d.pop("method")

        packages = JobManifestPackages.from_dict(d.pop("packages"))

        recorded_at = d.pop("recorded_at")

        resources = JobManifestResources.from_dict(d.pop("resources"))

        seeds = JobManifestSeeds.from_dict(d.pop("seeds"))

        def _parse_attempt(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        attempt = _parse_attempt(d.pop("attempt", UNSET))

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

        def _parse_from_checkpoint(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        from_checkpoint = _parse_from_checkpoint(d.pop("from_checkpoint", UNSET))

        def _parse_image_digest(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        image_digest = _parse_image_digest(d.pop("image_digest", UNSET))

        object_ = cast(Literal["job.manifest"] | Unset, d.pop("object", UNSET))
        if object_ != "job.manifest" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'job.manifest', got '{object_}'")

        job_manifest = cls(
            base_model=base_model,
            config=config,
            datasets=datasets,
            hardware=hardware,
            job_id=job_id,
            method=method,
            packages=packages,
            recorded_at=recorded_at,
            resources=resources,
            seeds=seeds,
            attempt=attempt,
            forked_from=forked_from,
            from_checkpoint=from_checkpoint,
            image_digest=image_digest,
            object_=object_,
        )

        job_manifest.additional_properties = d
        return job_manifest

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
