from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.trainer_event_public import TrainerEventPublic


T = TypeVar("T", bound="TrainerEventsPublic")


@_attrs_define
class TrainerEventsPublic:
    """
    Attributes:
        data (list[TrainerEventPublic]):
        has_more (bool):
        last_seq (int | None):
        object_ (Literal['list'] | Unset):  Default: 'list'.
    """

    data: list[TrainerEventPublic]
    has_more: bool
    last_seq: int | None
    object_: Literal["list"] | Unset = "list"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = []
        for data_item_data in self.data:
            data_item = data_item_data.to_dict()
            data.append(data_item)

        has_more = self.has_more

        last_seq: int | None
        last_seq = self.last_seq

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "data": data,
                "has_more": has_more,
                "last_seq": last_seq,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.trainer_event_public import TrainerEventPublic  # noqa: PLC0415

        d = dict(src_dict)
        data = []
        _data = d.pop("data")
        for data_item_data in _data:
            data_item = TrainerEventPublic.from_dict(data_item_data)

            data.append(data_item)

        has_more = d.pop("has_more")

        def _parse_last_seq(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_seq = _parse_last_seq(d.pop("last_seq"))

        object_ = cast(Literal["list"] | Unset, d.pop("object", UNSET))
        if object_ != "list" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'list', got '{object_}'")

        trainer_events_public = cls(
            data=data,
            has_more=has_more,
            last_seq=last_seq,
            object_=object_,
        )

        trainer_events_public.additional_properties = d
        return trainer_events_public

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
