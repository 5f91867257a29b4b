from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.model_public_format import ModelPublicFormat
from ..models.model_public_kind import ModelPublicKind
from ..types import UNSET, Unset

T = TypeVar("T", bound="ModelPublic")


@_attrs_define
class ModelPublic:
    """A trained model; usable as `model`, `method.teacher` or `method.reward.model` of later jobs.

    Attributes:
        base_model (str):
        created_at (int):
        format_ (ModelPublicFormat):
        id (str):
        job_id (None | str):
        kind (ModelPublicKind):
        name (str):
        alias_of (None | str | Unset):
        created (int | None | Unset):
        object_ (Literal['model'] | Unset):  Default: 'model'.
        owned_by (None | str | Unset):
        trainer_id (None | str | Unset):
    """

    base_model: str
    created_at: int
    format_: ModelPublicFormat
    id: str
    job_id: None | str
    kind: ModelPublicKind
    name: str
    alias_of: None | str | Unset = UNSET
    created: int | None | Unset = UNSET
    object_: Literal["model"] | Unset = "model"
    owned_by: None | str | Unset = UNSET
    trainer_id: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        base_model = self.base_model

        created_at = self.created_at

        format_ = self.format_.value

        id = self.id

        job_id: None | str
        job_id = self.job_id

        kind = self.kind.value

        name = self.name

        alias_of: None | str | Unset
        if isinstance(self.alias_of, Unset):
            alias_of = UNSET
        else:
            alias_of = self.alias_of

        created: int | None | Unset
        if isinstance(self.created, Unset):
            created = UNSET
        else:
            created = self.created

        object_ = self.object_

        owned_by: None | str | Unset
        if isinstance(self.owned_by, Unset):
            owned_by = UNSET
        else:
            owned_by = self.owned_by

        trainer_id: None | str | Unset
        if isinstance(self.trainer_id, Unset):
            trainer_id = UNSET
        else:
            trainer_id = self.trainer_id

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "base_model": base_model,
                "created_at": created_at,
                "format": format_,
                "id": id,
                "job_id": job_id,
                "kind": kind,
                "name": name,
            }
        )
        if alias_of is not UNSET:
            field_dict["alias_of"] = alias_of
        if created is not UNSET:
            field_dict["created"] = created
        if object_ is not UNSET:
            field_dict["object"] = object_
        if owned_by is not UNSET:
            field_dict["owned_by"] = owned_by
        if trainer_id is not UNSET:
            field_dict["trainer_id"] = trainer_id

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        base_model = d.pop("base_model")

        created_at = d.pop("created_at")

        format_ = ModelPublicFormat(d.pop("format"))

        id = d.pop("id")

        def _parse_job_id(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        job_id = _parse_job_id(d.pop("job_id"))

        kind = ModelPublicKind(d.pop("kind"))

        name = d.pop("name")

        def _parse_alias_of(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        alias_of = _parse_alias_of(d.pop("alias_of", UNSET))

        def _parse_created(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        created = _parse_created(d.pop("created", UNSET))

        object_ = cast(Literal["model"] | Unset, d.pop("object", UNSET))
        if object_ != "model" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'model', got '{object_}'")

        def _parse_owned_by(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        owned_by = _parse_owned_by(d.pop("owned_by", UNSET))

        def _parse_trainer_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        trainer_id = _parse_trainer_id(d.pop("trainer_id", UNSET))

        model_public = cls(
            base_model=base_model,
            created_at=created_at,
            format_=format_,
            id=id,
            job_id=job_id,
            kind=kind,
            name=name,
            alias_of=alias_of,
            created=created,
            object_=object_,
            owned_by=owned_by,
            trainer_id=trainer_id,
        )

        model_public.additional_properties = d
        return model_public

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
