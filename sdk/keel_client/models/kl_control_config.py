from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..models.kl_control_config_type import KLControlConfigType
from ..types import UNSET, Unset

T = TypeVar("T", bound="KLControlConfig")


@_attrs_define
class KLControlConfig:
    """KL coefficient control (VERL: `algorithm.kl_ctrl`).

    Attributes:
        horizon (int | Unset):  Default: 10000.
        kl_coef (float | Unset):  Default: 0.001.
        target_kl (float | Unset):  Default: 0.1.
        type_ (KLControlConfigType | Unset):  Default: KLControlConfigType.ADAPTIVE.
    """

    horizon: int | Unset = 10000
    kl_coef: float | Unset = 0.001
    target_kl: float | Unset = 0.1
    type_: KLControlConfigType | Unset = KLControlConfigType.ADAPTIVE

    def to_dict(self) -> dict[str, Any]:
        horizon = self.horizon

        kl_coef = self.kl_coef

        target_kl = self.target_kl

        type_: str | Unset = UNSET
        if not isinstance(self.type_, Unset):
            type_ = self.type_.value

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if horizon is not UNSET:
            field_dict["horizon"] = horizon
        if kl_coef is not UNSET:
            field_dict["kl_coef"] = kl_coef
        if target_kl is not UNSET:
            field_dict["target_kl"] = target_kl
        if type_ is not UNSET:
            field_dict["type"] = type_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        horizon = d.pop("horizon", UNSET)

        kl_coef = d.pop("kl_coef", UNSET)

        target_kl = d.pop("target_kl", UNSET)

        _type_ = d.pop("type", UNSET)
        type_: KLControlConfigType | Unset
        if isinstance(_type_, Unset):
            type_ = UNSET
        else:
            type_ = KLControlConfigType(_type_)

        kl_control_config = cls(
            horizon=horizon,
            kl_coef=kl_coef,
            target_kl=target_kl,
            type_=type_,
        )

        return kl_control_config
