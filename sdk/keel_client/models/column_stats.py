from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

T = TypeVar("T", bound="ColumnStats")


@_attrs_define
class ColumnStats:
    """Token-free statistics of one column: character lengths for text, values for numbers.

    Attributes:
        max_ (float | None | Unset):
        max_chars (int | None | Unset):
        mean (float | None | Unset):
        mean_chars (float | None | Unset):
        min_ (float | None | Unset):
        min_chars (int | None | Unset):
        nulls (int | Unset):  Default: 0.
        p95_chars (int | None | Unset): Exact below 1024 characters, within 1% above.
    """

    max_: float | None | Unset = UNSET
    max_chars: int | None | Unset = UNSET
    mean: float | None | Unset = UNSET
    mean_chars: float | None | Unset = UNSET
    min_: float | None | Unset = UNSET
    min_chars: int | None | Unset = UNSET
    nulls: int | Unset = 0
    p95_chars: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        max_: float | None | Unset
        if isinstance(self.max_, Unset):
            max_ = UNSET
        else:
            max_ = self.max_

        max_chars: int | None | Unset
        if isinstance(self.max_chars, Unset):
            max_chars = UNSET
        else:
            max_chars = self.max_chars

        mean: float | None | Unset
        if isinstance(self.mean, Unset):
            mean = UNSET
        else:
            mean = self.mean

        mean_chars: float | None | Unset
        if isinstance(self.mean_chars, Unset):
            mean_chars = UNSET
        else:
            mean_chars = self.mean_chars

        min_: float | None | Unset
        if isinstance(self.min_, Unset):
            min_ = UNSET
        else:
            min_ = self.min_

        min_chars: int | None | Unset
        if isinstance(self.min_chars, Unset):
            min_chars = UNSET
        else:
            min_chars = self.min_chars

        nulls = self.nulls

        p95_chars: int | None | Unset
        if isinstance(self.p95_chars, Unset):
            p95_chars = UNSET
        else:
            p95_chars = self.p95_chars

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if max_ is not UNSET:
            field_dict["max"] = max_
        if max_chars is not UNSET:
            field_dict["max_chars"] = max_chars
        if mean is not UNSET:
            field_dict["mean"] = mean
        if mean_chars is not UNSET:
            field_dict["mean_chars"] = mean_chars
        if min_ is not UNSET:
            field_dict["min"] = min_
        if min_chars is not UNSET:
            field_dict["min_chars"] = min_chars
        if nulls is not UNSET:
            field_dict["nulls"] = nulls
        if p95_chars is not UNSET:
            field_dict["p95_chars"] = p95_chars

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)

        def _parse_max_(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        max_ = _parse_max_(d.pop("max", UNSET))

        def _parse_max_chars(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_chars = _parse_max_chars(d.pop("max_chars", UNSET))

        def _parse_mean(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        mean = _parse_mean(d.pop("mean", UNSET))

        def _parse_mean_chars(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        mean_chars = _parse_mean_chars(d.pop("mean_chars", UNSET))

        def _parse_min_(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        min_ = _parse_min_(d.pop("min", UNSET))

        def _parse_min_chars(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        min_chars = _parse_min_chars(d.pop("min_chars", UNSET))

        nulls = d.pop("nulls", UNSET)

        def _parse_p95_chars(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        p95_chars = _parse_p95_chars(d.pop("p95_chars", UNSET))

        column_stats = cls(
            max_=max_,
            max_chars=max_chars,
            mean=mean,
            mean_chars=mean_chars,
            min_=min_,
            min_chars=min_chars,
            nulls=nulls,
            p95_chars=p95_chars,
        )

        column_stats.additional_properties = d
        return column_stats

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
