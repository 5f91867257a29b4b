from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.checkpoint_public_metrics import CheckpointPublicMetrics


T = TypeVar("T", bound="CheckpointPublic")


@_attrs_define
class CheckpointPublic:
    """
    Attributes:
        bytes_ (int):
        created_at (int):
        id (str):
        job_id (str):
        metrics (CheckpointPublicMetrics):
        step (int):
        object_ (Literal['checkpoint'] | Unset):  Default: 'checkpoint'.
    """

    bytes_: int
    created_at: int
    id: str
    job_id: str
    metrics: CheckpointPublicMetrics
    step: int
    object_: Literal["checkpoint"] | Unset = "checkpoint"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        bytes_ = self.bytes_

        created_at = self.created_at

        id = self.id

        job_id = self.job_id

        metrics = self.metrics.to_dict()

        step = self.step

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "bytes": bytes_,
                "created_at": created_at,
                "id": id,
                "job_id": job_id,
                "metrics": metrics,
                "step": step,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.checkpoint_public_metrics import CheckpointPublicMetrics  # noqa: PLC0415

        d = dict(src_dict)
        bytes_ = d.pop("bytes")

        created_at = d.pop("created_at")

        id = d.pop("id")

        job_id = d.pop("job_id")

        metrics = CheckpointPublicMetrics.from_dict(d.pop("metrics"))

        step = d.pop("step")

        object_ = cast(Literal["checkpoint"] | Unset, d.pop("object", UNSET))
        if object_ != "checkpoint" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'checkpoint', got '{object_}'")

        checkpoint_public = cls(
            bytes_=bytes_,
            created_at=created_at,
            id=id,
            job_id=job_id,
            metrics=metrics,
            step=step,
            object_=object_,
        )

        checkpoint_public.additional_properties = d
        return checkpoint_public

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
