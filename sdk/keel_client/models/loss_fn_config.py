from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="LossFnConfig")


@_attrs_define
class LossFnConfig:
    """Tinker's names and meanings; `r` is the ratio of the trained to the sampling policy.

    Attributes:
        beta (float | None | Unset): `dpo`: the KL penalty (default 0.1); `dro`: the quadratic penalty's weight (default
            0.05).
        clip_high_threshold (float | None | Unset): `ppo`, `cispo`: the highest `r` counts as, at least
            `clip_low_threshold` (default 1.2 for `ppo`,
            4.0 for `cispo`).
        clip_low_threshold (float | None | Unset): `ppo`, `cispo`: the lowest `r` counts as (an absolute ratio; default
            0.8 for `ppo`, 0.0 for `cispo`).
    """

    beta: float | None | Unset = UNSET
    clip_high_threshold: float | None | Unset = UNSET
    clip_low_threshold: float | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        beta: float | None | Unset
        if isinstance(self.beta, Unset):
            beta = UNSET
        else:
            beta = self.beta

        clip_high_threshold: float | None | Unset
        if isinstance(self.clip_high_threshold, Unset):
            clip_high_threshold = UNSET
        else:
            clip_high_threshold = self.clip_high_threshold

        clip_low_threshold: float | None | Unset
        if isinstance(self.clip_low_threshold, Unset):
            clip_low_threshold = UNSET
        else:
            clip_low_threshold = self.clip_low_threshold

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if beta is not UNSET:
            field_dict["beta"] = beta
        if clip_high_threshold is not UNSET:
            field_dict["clip_high_threshold"] = clip_high_threshold
        if clip_low_threshold is not UNSET:
            field_dict["clip_low_threshold"] = clip_low_threshold

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

        def _parse_clip_high_threshold(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        clip_high_threshold = _parse_clip_high_threshold(d.pop("clip_high_threshold", UNSET))

        def _parse_clip_low_threshold(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        clip_low_threshold = _parse_clip_low_threshold(d.pop("clip_low_threshold", UNSET))

        loss_fn_config = cls(
            beta=beta,
            clip_high_threshold=clip_high_threshold,
            clip_low_threshold=clip_low_threshold,
        )

        return loss_fn_config
