from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.job_event_public_type import JobEventPublicType
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.job_event_public_data import JobEventPublicData


T = TypeVar("T", bound="JobEventPublic")


@_attrs_define
class JobEventPublic:
    """One entry of a job's event log. `seq` counts from 1 without gaps.

    Attributes:
        created_at (int):
        data (JobEventPublicData):
        seq (int):
        type_ (JobEventPublicType):
        object_ (Literal['job.event'] | Unset):  Default: 'job.event'.
    """

    created_at: int
    data: JobEventPublicData
    seq: int
    type_: JobEventPublicType
    object_: Literal["job.event"] | Unset = "job.event"
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
        from ..models.job_event_public_data import JobEventPublicData  # noqa: PLC0415

        d = dict(src_dict)
        created_at = d.pop("created_at")

        data = JobEventPublicData.from_dict(d.pop("data"))

        seq = d.pop("seq")

        type_ = JobEventPublicType(d.pop("type"))

        object_ = cast(Literal["job.event"] | Unset, d.pop("object", UNSET))
        if object_ != "job.event" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'job.event', got '{object_}'")

        job_event_public = cls(
            created_at=created_at,
            data=data,
            seq=seq,
            type_=type_,
            object_=object_,
        )

        job_event_public.additional_properties = d
        return job_event_public

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
