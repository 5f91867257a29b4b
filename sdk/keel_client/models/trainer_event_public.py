from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.trainer_event_public_type import TrainerEventPublicType
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.trainer_event_public_data import TrainerEventPublicData


T = TypeVar("T", bound="TrainerEventPublic")


@_attrs_define
class TrainerEventPublic:
    """One entry of a trainer's event log; `seq` counts from 1 without gaps.

    Attributes:
        created_at (int):
        data (TrainerEventPublicData):
        seq (int):
        type_ (TrainerEventPublicType):
        object_ (Literal['trainer.event'] | Unset):  Default: 'trainer.event'.
    """

    created_at: int
    data: TrainerEventPublicData
    seq: int
    type_: TrainerEventPublicType
    object_: Literal["trainer.event"] | Unset = "trainer.event"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        created_at = self.created_at

        data = self.data.to_dict()

        seq = self.seq

        type_ = self.type_.value

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created_at": created_at,
                "data": data,
                "seq": seq,
                "type": type_,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.trainer_event_public_data import TrainerEventPublicData  # noqa: PLC0415

        d = dict(src_dict)
        created_at = d.pop("created_at")

        data = TrainerEventPublicData.from_dict(d.pop("data"))

        seq = d.pop("seq")

        type_ = TrainerEventPublicType(d.pop("type"))

        object_ = cast(Literal["trainer.event"] | Unset, d.pop("object", UNSET))
        if object_ != "trainer.event" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'trainer.event', got '{object_}'")

        trainer_event_public = cls(
            created_at=created_at,
            data=data,
            seq=seq,
            type_=type_,
            object_=object_,
        )

        trainer_event_public.additional_properties = d
        return trainer_event_public

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
