from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="OverlongBufferConfig")


@_attrs_define
class OverlongBufferConfig:
    """DAPO's soft overlong punishment: a response longer than `max_response_length - len` loses
    `(length - (max_response_length - len)) / len * penalty_factor` of its score (at most
    `penalty_factor`, at the full length).

        Attributes:
            enable (bool | Unset):  Default: False.
            len_ (int | Unset): Tokens before `data.max_response_length` where the penalty starts; with `enable`, below
                `data.max_response_length`. Default: 64.
            penalty_factor (float | Unset):  Default: 1.0.
    """

    enable: bool | Unset = False
    len_: int | Unset = 64
    penalty_factor: float | Unset = 1.0

    def to_dict(self) -> dict[str, Any]:
        enable = self.enable

        len_ = self.len_

        penalty_factor = self.penalty_factor

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if enable is not UNSET:
            field_dict["enable"] = enable
        if len_ is not UNSET:
            field_dict["len"] = len_
        if penalty_factor is not UNSET:
            field_dict["penalty_factor"] = penalty_factor

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        enable = d.pop("enable", UNSET)

        len_ = d.pop("len", UNSET)

        penalty_factor = d.pop("penalty_factor", UNSET)

        overlong_buffer_config = cls(
            enable=enable,
            len_=len_,
            penalty_factor=penalty_factor,
        )

        return overlong_buffer_config
