from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.distill_policy_method import DistillPolicyMethod
    from ..models.dpo_method import DPOMethod
    from ..models.eval_method import EvalMethod
    from ..models.integration import Integration
    from ..models.job_create_metadata import JobCreateMetadata
    from ..models.ppo_method import PPOMethod
    from ..models.resources import Resources
    from ..models.reward_model_method import RewardModelMethod
    from ..models.rm_distill_method import RMDistillMethod
    from ..models.sft_method import SFTMethod


T = TypeVar("T", bound="JobCreate")


@_attrs_define
class JobCreate:
    """A training job: a base model, a dataset, and a method with its hyperparameters.

    Attributes:
        method (DistillPolicyMethod | DPOMethod | EvalMethod | PPOMethod | RewardModelMethod | RMDistillMethod |
            SFTMethod):
        model (str): A Keel model id (`model-...`) or checkpoint id (`ckpt-...`: its Hugging Face export) of this
            project, a hub id (`org/name`), or an absolute directory under one of the deployment's model roots.
        from_checkpoint (None | str | Unset): A checkpoint (of this project, same method) to continue training from.
        integrations (list[Integration] | Unset): Experiment trackers to mirror the job's metrics to (at most one of
            each type).
        metadata (JobCreateMetadata | Unset): Up to 16 string pairs of your own.
        resources (Resources | Unset): Where a job runs: data-parallel workers and what each gets.
        seed (int | Unset):  Default: 0.
        suffix (None | str | Unset): Up to 40 characters added to the output model's name.
        training_file (None | str | Unset): A file of this project whose purpose fits the method: sft -> `sft`,
            reward_model, rm_distill and dpo
            -> `preference`, ppo and eval -> `prompts` (for eval: the prompts evaluated on). Required, except for
            ppo with `rollout.source: trajectories`: left out, the job snapshots the project's scored trajectories
            into a new file (purpose `trajectories`); given, it names such a snapshot to train on again.
        validation_file (None | str | Unset): Held-out rows with the same purpose; validation metrics appear as
            `val/...` (not for eval).
    """

    method: DistillPolicyMethod | DPOMethod | EvalMethod | PPOMethod | RewardModelMethod | RMDistillMethod | SFTMethod
    model: str
    from_checkpoint: None | str | Unset = UNSET
    integrations: list[Integration] | Unset = UNSET
    metadata: JobCreateMetadata | Unset = UNSET
    resources: Resources | Unset = UNSET
    seed: int | Unset = 0
    suffix: None | str | Unset = UNSET
    training_file: None | str | Unset = UNSET
    validation_file: None | str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.distill_policy_method import DistillPolicyMethod  # noqa: PLC0415
        from ..models.dpo_method import DPOMethod  # noqa: PLC0415
        from ..models.ppo_method import PPOMethod  # noqa: PLC0415
        from ..models.reward_model_method import RewardModelMethod  # noqa: PLC0415
        from ..models.rm_distill_method import RMDistillMethod  # noqa: PLC0415
        from ..models.sft_method import SFTMethod  # noqa: PLC0415

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

        from_checkpoint: None | str | Unset
        if isinstance(self.from_checkpoint, Unset):
            from_checkpoint = UNSET
        else:
            from_checkpoint = self.from_checkpoint

        integrations: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.integrations, Unset):
            integrations = []
            for integrations_item_data in self.integrations:
                integrations_item = integrations_item_data.to_dict()
                integrations.append(integrations_item)

        metadata: dict[str, Any] | Unset = UNSET
        if not isinstance(self.metadata, Unset):
            metadata = self.metadata.to_dict()

        resources: dict[str, Any] | Unset = UNSET
        if not isinstance(self.resources, Unset):
            resources = self.resources.to_dict()

        seed = self.seed

        suffix: None | str | Unset
        if isinstance(self.suffix, Unset):
            suffix = UNSET
        else:
            suffix = self.suffix

        training_file: None | str | Unset
        if isinstance(self.training_file, Unset):
            training_file = UNSET
        else:
            training_file = self.training_file

        validation_file: None | str | Unset
        if isinstance(self.validation_file, Unset):
            validation_file = UNSET
        else:
            validation_file = self.validation_file

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "method": method,
                "model": model,
            }
        )
        if from_checkpoint is not UNSET:
            field_dict["from_checkpoint"] = from_checkpoint
        if integrations is not UNSET:
            field_dict["integrations"] = integrations
        if metadata is not UNSET:
            field_dict["metadata"] = metadata
        if resources is not UNSET:
            field_dict["resources"] = resources
        if seed is not UNSET:
            field_dict["seed"] = seed
        if suffix is not UNSET:
            field_dict["suffix"] = suffix
        if training_file is not UNSET:
            field_dict["training_file"] = training_file
        if validation_file is not UNSET:
            field_dict["validation_file"] = validation_file

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.distill_policy_method import DistillPolicyMethod  # noqa: PLC0415
        from ..models.dpo_method import DPOMethod  # noqa: PLC0415
        from ..models.eval_method import EvalMethod  # noqa: PLC0415
        from ..models.integration import Integration  # noqa: PLC0415
        from ..models.job_create_metadata import JobCreateMetadata  # noqa: PLC0415
        from ..models.ppo_method import PPOMethod  # noqa: PLC0415
        from ..models.resources import Resources  # noqa: PLC0415
        from ..models.reward_model_method import RewardModelMethod  # noqa: PLC0415
        from ..models.rm_distill_method import RMDistillMethod  # noqa: PLC0415
        from ..models.sft_method import SFTMethod  # noqa: PLC0415

        d = dict(src_dict)

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

        def _parse_from_checkpoint(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        from_checkpoint = _parse_from_checkpoint(d.pop("from_checkpoint", UNSET))

        _integrations = d.pop("integrations", UNSET)
        integrations: list[Integration] | Unset = UNSET
        if _integrations is not UNSET:
            integrations = []
            for integrations_item_data in _integrations:
                integrations_item = Integration.from_dict(integrations_item_data)

                integrations.append(integrations_item)

        _metadata = d.pop("metadata", UNSET)
        metadata: JobCreateMetadata | Unset
        if isinstance(_metadata, Unset):
            metadata = UNSET
        else:
            metadata = JobCreateMetadata.from_dict(_metadata)

        _resources = d.pop("resources", UNSET)
        resources: Resources | Unset
        if isinstance(_resources, Unset):
            resources = UNSET
        else:
            resources = Resources.from_dict(_resources)

        seed = d.pop("seed", UNSET)

        def _parse_suffix(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        suffix = _parse_suffix(d.pop("suffix", UNSET))

        def _parse_training_file(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        training_file = _parse_training_file(d.pop("training_file", UNSET))

        def _parse_validation_file(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        validation_file = _parse_validation_file(d.pop("validation_file", UNSET))

        job_create = cls(
            method=method,
            model=model,
            from_checkpoint=from_checkpoint,
            integrations=integrations,
            metadata=metadata,
            resources=resources,
            seed=seed,
            suffix=suffix,
            training_file=training_file,
            validation_file=validation_file,
        )

        return job_create
