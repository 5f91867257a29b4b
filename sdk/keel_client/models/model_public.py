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
        object_ (Literal['model'] | Unset):  Default: 'model'.
    """

    base_model: str
    created_at: int
    format_: ModelPublicFormat
    id: str
    job_id: None | str
    kind: ModelPublicKind
    name: str
    object_: Literal["model"] | Unset = "model"
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

        object_ = self.object_

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
        if object_ is not UNSET:
            field_dict["object"] = object_

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

        object_ = cast(Literal["model"] | Unset, d.pop("object", UNSET))
        if object_ != "model" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'model', got '{object_}'")

        model_public = cls(
            base_model=base_model,
            created_at=created_at,
            format_=format_,
            id=id,
            job_id=job_id,
            kind=kind,
            name=name,
            object_=object_,
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
