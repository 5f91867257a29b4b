from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.overlong_buffer_config import OverlongBufferConfig


T = TypeVar("T", bound="RewardShapingConfig")


@_attrs_define
class RewardShapingConfig:
    """What is done to every sequence score before advantages (VERL: `reward_model`).

    Attributes:
        overlong_buffer (OverlongBufferConfig | Unset): DAPO's soft overlong punishment: a response longer than
            `max_response_length - len` loses
            `(length - (max_response_length - len)) / len * penalty_factor` of its score (at most
            `penalty_factor`, at the full length).
    """

    overlong_buffer: OverlongBufferConfig | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        overlong_buffer: dict[str, Any] | Unset = UNSET
        if not isinstance(self.overlong_buffer, Unset):
            overlong_buffer = self.overlong_buffer.to_dict()

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if overlong_buffer is not UNSET:
            field_dict["overlong_buffer"] = overlong_buffer

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.overlong_buffer_config import OverlongBufferConfig  # noqa: PLC0415

        d = dict(src_dict)
        _overlong_buffer = d.pop("overlong_buffer", UNSET)
        overlong_buffer: OverlongBufferConfig | Unset
        if isinstance(_overlong_buffer, Unset):
            overlong_buffer = UNSET
        else:
            overlong_buffer = OverlongBufferConfig.from_dict(_overlong_buffer)

        reward_shaping_config = cls(
            overlong_buffer=overlong_buffer,
        )

        return reward_shaping_config
