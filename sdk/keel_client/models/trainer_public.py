from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.trainer_public_dtype import TrainerPublicDtype
from ..models.trainer_public_status import TrainerPublicStatus
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.lora_spec import LoraSpec
    from ..models.trainer_error import TrainerError
    from ..models.trainer_public_metadata import TrainerPublicMetadata
    from ..models.trainer_resources import TrainerResources


T = TypeVar("T", bound="TrainerPublic")


@_attrs_define
class TrainerPublic:
    """A trainer. `status`: `active` (takes calls), `idle` (released after `idle_timeout_s` with its state
    saved: the next call restores it), `released` (its actor was lost without a save: the next call
    restores the last save, or the base model), `deleted` or `failed` (takes no more calls).

        Attributes:
            created_at (int):
            created_by (None | str):
            dtype (TrainerPublicDtype):
            id (str):
            idle_timeout_s (int):
            last_saved_step (int | None):
            last_used_at (int):
            lora (LoraSpec | None):
            metadata (TrainerPublicMetadata):
            model (str):
            released_at (int | None):
            resources (TrainerResources): What the trainer's actor reserves on the Ray cluster while it holds the model.
            seed (int):
            status (TrainerPublicStatus):
            step (int):
            tokens (int):
            vocab_size (int | None):
            error (None | TrainerError | Unset):
            object_ (Literal['trainer'] | Unset):  Default: 'trainer'.
    """

    created_at: int
    created_by: None | str
    dtype: TrainerPublicDtype
    id: str
    idle_timeout_s: int
    last_saved_step: int | None
    last_used_at: int
    lora: LoraSpec | None
    metadata: TrainerPublicMetadata
    model: str
    released_at: int | None
    resources: TrainerResources
    seed: int
    status: TrainerPublicStatus
    step: int
    tokens: int
    vocab_size: int | None
    error: None | TrainerError | Unset = UNSET
    object_: Literal["trainer"] | Unset = "trainer"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.lora_spec import LoraSpec  # noqa: PLC0415
        from ..models.trainer_error import TrainerError  # noqa: PLC0415

        created_at = self.created_at

        created_by: None | str
        created_by = self.created_by

        dtype = self.dtype.value

        id = self.id

        idle_timeout_s = self.idle_timeout_s

        last_saved_step: int | None
        last_saved_step = self.last_saved_step

        last_used_at = self.last_used_at

        lora: dict[str, Any] | None
        if isinstance(self.lora, LoraSpec):
            lora = self.lora.to_dict()
        else:
            lora = self.lora

        metadata = self.metadata.to_dict()

        model = self.model

        released_at: int | None
        released_at = self.released_at

        resources = self.resources.to_dict()

        seed = self.seed

        status = self.status.value

        step = self.step

        tokens = self.tokens

        vocab_size: int | None
        vocab_size = self.vocab_size

        error: dict[str, Any] | None | Unset
        if isinstance(self.error, Unset):
            error = UNSET
        elif isinstance(self.error, TrainerError):
            error = self.error.to_dict()
        else:
            error = self.error

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created_at": created_at,
                "created_by": created_by,
                "dtype": dtype,
                "id": id,
                "idle_timeout_s": idle_timeout_s,
                "last_saved_step": last_saved_step,
                "last_used_at": last_used_at,
                "lora": lora,
                "metadata": metadata,
                "model": model,
                "released_at": released_at,
                "resources": resources,
                "seed": seed,
                "status": status,
                "step": step,
                "tokens": tokens,
                "vocab_size": vocab_size,
            }
        )
        if error is not UNSET:
            field_dict["error"] = error
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.lora_spec import LoraSpec  # noqa: PLC0415
        from ..models.trainer_error import TrainerError  # noqa: PLC0415
        from ..models.trainer_public_metadata import TrainerPublicMetadata  # noqa: PLC0415
        from ..models.trainer_resources import TrainerResources  # noqa: PLC0415

        d = dict(src_dict)
        created_at = d.pop("created_at")

        def _parse_created_by(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        created_by = _parse_created_by(d.pop("created_by"))

        dtype = TrainerPublicDtype(d.pop("dtype"))

        id = d.pop("id")

        idle_timeout_s = d.pop("idle_timeout_s")

        def _parse_last_saved_step(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_saved_step = _parse_last_saved_step(d.pop("last_saved_step"))

        last_used_at = d.pop("last_used_at")

        def _parse_lora(data: object) -> LoraSpec | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                lora_type_0 = LoraSpec.from_dict(data)

                return lora_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(LoraSpec | None, data)

        lora = _parse_lora(d.pop("lora"))

        metadata = TrainerPublicMetadata.from_dict(d.pop("metadata"))

        model = d.pop("model")

        def _parse_released_at(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        released_at = _parse_released_at(d.pop("released_at"))

        resources = TrainerResources.from_dict(d.pop("resources"))

        seed = d.pop("seed")

        status = TrainerPublicStatus(d.pop("status"))

        step = d.pop("step")

        tokens = d.pop("tokens")

        def _parse_vocab_size(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        vocab_size = _parse_vocab_size(d.pop("vocab_size"))

        def _parse_error(data: object) -> None | TrainerError | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                error_type_0 = TrainerError.from_dict(data)

                return error_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | TrainerError | Unset, data)

        error = _parse_error(d.pop("error", UNSET))

        object_ = cast(Literal["trainer"] | Unset, d.pop("object", UNSET))
        if object_ != "trainer" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'trainer', got '{object_}'")

        trainer_public = cls(
            created_at=created_at,
            created_by=created_by,
            dtype=dtype,
            id=id,
            idle_timeout_s=idle_timeout_s,
            last_saved_step=last_saved_step,
            last_used_at=last_used_at,
            lora=lora,
            metadata=metadata,
            model=model,
            released_at=released_at,
            resources=resources,
            seed=seed,
            status=status,
            step=step,
            tokens=tokens,
            vocab_size=vocab_size,
            error=error,
            object_=object_,
        )

        trainer_public.additional_properties = d
        return trainer_public

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
