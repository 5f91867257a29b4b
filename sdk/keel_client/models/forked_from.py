from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="ForkedFrom")


@_attrs_define
class ForkedFrom:
    """Where a forked job started: the parent job and its checkpoint.

    Attributes:
        checkpoint (str):
        job (str):
        step (int):
    """

    checkpoint: str
    job: str
    step: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        checkpoint = self.checkpoint

        job = self.job

        step = self.step

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "checkpoint": checkpoint,
                "job": job,
                "step": step,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        checkpoint = d.pop("checkpoint")

        job = d.pop("job")

        step = d.pop("step")

        forked_from = cls(
            checkpoint=checkpoint,
            job=job,
            step=step,
        )

        forked_from.additional_properties = d
        return forked_from

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
