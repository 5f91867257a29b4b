from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.trainer_create_dtype import TrainerCreateDtype
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.lora_spec import LoraSpec
    from ..models.trainer_create_metadata import TrainerCreateMetadata
    from ..models.trainer_resources import TrainerResources


T = TypeVar("T", bound="TrainerCreate")


@_attrs_define
class TrainerCreate:
    """A trainer: a base model held by an actor, trained by your own loop through the primitives.

    Attributes:
        model (str): A Keel model id (`model-...`) or checkpoint id (`ckpt-...`: its Hugging Face export) of this
            project, a hub id (`org/name`), or an absolute directory under one of the deployment's model roots.
        dtype (TrainerCreateDtype | Unset): Compute dtype; weights and optimizer state stay float32. Default:
            TrainerCreateDtype.FLOAT32.
        idle_timeout_s (int | Unset): After this long without a call the actor is released (its state saved first) and
            its resources freed;
            the next call restores it. Default: 600.
        lora (LoraSpec | None | Unset): LoRA settings; null (the default) trains every weight (full fine-tuning).
        metadata (TrainerCreateMetadata | Unset): Up to 16 string pairs of your own.
        resources (TrainerResources | Unset): What the trainer's actor reserves on the Ray cluster while it holds the
            model.
        seed (int | Unset): Seeds the adapters' initialisation and sampling without an explicit `seed`. Default: 0.
    """

    model: str
    dtype: TrainerCreateDtype | Unset = TrainerCreateDtype.FLOAT32
    idle_timeout_s: int | Unset = 600
    lora: LoraSpec | None | Unset = UNSET
    metadata: TrainerCreateMetadata | Unset = UNSET
    resources: TrainerResources | Unset = UNSET
    seed: int | Unset = 0

    def to_dict(self) -> dict[str, Any]:
        from ..models.lora_spec import LoraSpec  # noqa: PLC0415

        model = self.model

        dtype: str | Unset = UNSET
        if not isinstance(self.dtype, Unset):
            dtype = self.dtype.value

        idle_timeout_s = self.idle_timeout_s

        lora: dict[str, Any] | None | Unset
        if isinstance(self.lora, Unset):
            lora = UNSET
        elif isinstance(self.lora, LoraSpec):
            lora = self.lora.to_dict()
        else:
            lora = self.lora

        metadata: dict[str, Any] | Unset = UNSET
        if not isinstance(self.metadata, Unset):
            metadata = self.metadata.to_dict()

        resources: dict[str, Any] | Unset = UNSET
        if not isinstance(self.resources, Unset):
            resources = self.resources.to_dict()

        seed = self.seed

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "model": model,
            }
        )
        if dtype is not UNSET:
            field_dict["dtype"] = dtype
        if idle_timeout_s is not UNSET:
            field_dict["idle_timeout_s"] = idle_timeout_s
        if lora is not UNSET:
            field_dict["lora"] = lora
        if metadata is not UNSET:
            field_dict["metadata"] = metadata
        if resources is not UNSET:
            field_dict["resources"] = resources
        if seed is not UNSET:
            field_dict["seed"] = seed

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.lora_spec import LoraSpec  # noqa: PLC0415
        from ..models.trainer_create_metadata import TrainerCreateMetadata  # noqa: PLC0415
        from ..models.trainer_resources import TrainerResources  # noqa: PLC0415

        d = dict(src_dict)
        model = d.pop("model")

        _dtype = d.pop("dtype", UNSET)
        dtype: TrainerCreateDtype | Unset
        if isinstance(_dtype, Unset):
            dtype = UNSET
        else:
            dtype = TrainerCreateDtype(_dtype)

        idle_timeout_s = d.pop("idle_timeout_s", UNSET)

        def _parse_lora(data: object) -> LoraSpec | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                lora_type_0 = LoraSpec.from_dict(data)

                return lora_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(LoraSpec | None | Unset, data)

        lora = _parse_lora(d.pop("lora", UNSET))

        _metadata = d.pop("metadata", UNSET)
        metadata: TrainerCreateMetadata | Unset
        if isinstance(_metadata, Unset):
            metadata = UNSET
        else:
            metadata = TrainerCreateMetadata.from_dict(_metadata)

        _resources = d.pop("resources", UNSET)
        resources: TrainerResources | Unset
        if isinstance(_resources, Unset):
            resources = UNSET
        else:
            resources = TrainerResources.from_dict(_resources)

        seed = d.pop("seed", UNSET)

        trainer_create = cls(
            model=model,
            dtype=dtype,
            idle_timeout_s=idle_timeout_s,
            lora=lora,
            metadata=metadata,
            resources=resources,
            seed=seed,
        )

        return trainer_create
