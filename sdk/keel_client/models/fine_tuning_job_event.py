from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.fine_tuning_job_event_level import FineTuningJobEventLevel
from ..models.fine_tuning_job_event_type import FineTuningJobEventType
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.fine_tuning_job_event_data_type_0 import FineTuningJobEventDataType0


T = TypeVar("T", bound="FineTuningJobEvent")


@_attrs_define
class FineTuningJobEvent:
    """
    Attributes:
        created_at (int):
        id (str):
        level (FineTuningJobEventLevel):
        message (str):
        type_ (FineTuningJobEventType):
        data (FineTuningJobEventDataType0 | None | Unset):
        object_ (Literal['fine_tuning.job.event'] | Unset):  Default: 'fine_tuning.job.event'.
    """

    created_at: int
    id: str
    level: FineTuningJobEventLevel
    message: str
    type_: FineTuningJobEventType
    data: FineTuningJobEventDataType0 | None | Unset = UNSET
    object_: Literal["fine_tuning.job.event"] | Unset = "fine_tuning.job.event"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.fine_tuning_job_event_data_type_0 import FineTuningJobEventDataType0  # noqa: PLC0415

        created_at = self.created_at

        id = self.id

        level = self.level.value

        message = self.message

        type_ = self.type_.value

        data: dict[str, Any] | None | Unset
        if isinstance(self.data, Unset):
            data = UNSET
        elif isinstance(self.data, FineTuningJobEventDataType0):
            data = self.data.to_dict()
        else:
            data = self.data

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created_at": created_at,
                "id": id,
                "level": level,
                "message": message,
                "type": type_,
            }
        )
        if data is not UNSET:
            field_dict["data"] = data
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.fine_tuning_job_event_data_type_0 import FineTuningJobEventDataType0  # noqa: PLC0415

        d = dict(src_dict)
        created_at = d.pop("created_at")

        id = d.pop("id")

        level = FineTuningJobEventLevel(d.pop("level"))

        message = d.pop("message")

        type_ = FineTuningJobEventType(d.pop("type"))

        def _parse_data(data: object) -> FineTuningJobEventDataType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                data_type_0 = FineTuningJobEventDataType0.from_dict(data)

                return data_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(FineTuningJobEventDataType0 | None | Unset, data)

        data = _parse_data(d.pop("data", UNSET))

        object_ = cast(Literal["fine_tuning.job.event"] | Unset, d.pop("object", UNSET))
        if object_ != "fine_tuning.job.event" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'fine_tuning.job.event', got '{object_}'")

        fine_tuning_job_event = cls(
            created_at=created_at,
            id=id,
            level=level,
            message=message,
            type_=type_,
            data=data,
            object_=object_,
        )

        fine_tuning_job_event.additional_properties = d
        return fine_tuning_job_event

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
