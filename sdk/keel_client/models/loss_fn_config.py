from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="LossFnConfig")


@_attrs_define
class LossFnConfig:
    """
    Attributes:
        beta (float | None | Unset): `dpo`: the KL penalty (default 0.1).
        clip_high (float | None | Unset): `ppo`: the ratio's upper clip is 1 + clip_high (default 0.2).
        clip_low (float | None | Unset): `ppo`: the ratio's lower clip is 1 - clip_low (default 0.2).
        clip_ratio_c (float | None | Unset): `ppo`: dual-clip bound for negative advantages (default 3.0).
    """

    beta: float | None | Unset = UNSET
    clip_high: float | None | Unset = UNSET
    clip_low: float | None | Unset = UNSET
    clip_ratio_c: float | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        beta: float | None | Unset
        if isinstance(self.beta, Unset):
            beta = UNSET
        else:
            beta = self.beta

        clip_high: float | None | Unset
        if isinstance(self.clip_high, Unset):
            clip_high = UNSET
        else:
            clip_high = self.clip_high

        clip_low: float | None | Unset
        if isinstance(self.clip_low, Unset):
            clip_low = UNSET
        else:
            clip_low = self.clip_low

        clip_ratio_c: float | None | Unset
        if isinstance(self.clip_ratio_c, Unset):
            clip_ratio_c = UNSET
        else:
            clip_ratio_c = self.clip_ratio_c

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if beta is not UNSET:
            field_dict["beta"] = beta
        if clip_high is not UNSET:
            field_dict["clip_high"] = clip_high
        if clip_low is not UNSET:
            field_dict["clip_low"] = clip_low
        if clip_ratio_c is not UNSET:
            field_dict["clip_ratio_c"] = clip_ratio_c

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)

        def _parse_beta(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        beta = _parse_beta(d.pop("beta", UNSET))

        def _parse_clip_high(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        clip_high = _parse_clip_high(d.pop("clip_high", UNSET))

        def _parse_clip_low(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        clip_low = _parse_clip_low(d.pop("clip_low", UNSET))

        def _parse_clip_ratio_c(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        clip_ratio_c = _parse_clip_ratio_c(d.pop("clip_ratio_c", UNSET))

        loss_fn_config = cls(
            beta=beta,
            clip_high=clip_high,
            clip_low=clip_low,
            clip_ratio_c=clip_ratio_c,
        )

        return loss_fn_config
