from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.metric_series import MetricSeries


T = TypeVar("T", bound="JobMetricsPublic")


@_attrs_define
class JobMetricsPublic:
    """Time series per metric name from the job's `job.metrics` events.

    Attributes:
        data (list[MetricSeries]):
        job_id (str):
        object_ (Literal['job.metrics'] | Unset):  Default: 'job.metrics'.
    """

    data: list[MetricSeries]
    job_id: str
    object_: Literal["job.metrics"] | Unset = "job.metrics"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = []
        for data_item_data in self.data:
            data_item = data_item_data.to_dict()
            data.append(data_item)

        job_id = self.job_id

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "data": data,
                "job_id": job_id,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.metric_series import MetricSeries  # noqa: PLC0415

        d = dict(src_dict)
        data = []
        _data = d.pop("data")
        for data_item_data in _data:
            data_item = MetricSeries.from_dict(data_item_data)

            data.append(data_item)

        job_id = d.pop("job_id")

        object_ = cast(Literal["job.metrics"] | Unset, d.pop("object", UNSET))
        if object_ != "job.metrics" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'job.metrics', got '{object_}'")

        job_metrics_public = cls(
            data=data,
            job_id=job_id,
            object_=object_,
        )

        job_metrics_public.additional_properties = d
        return job_metrics_public

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
