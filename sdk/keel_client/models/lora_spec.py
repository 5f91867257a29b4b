from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="LoraSpec")


@_attrs_define
class LoraSpec:
    """Train LoRA adapters instead of every weight.

    Attributes:
        alpha (int | Unset): Scaling numerator (scale = alpha / rank). Default: 16.
        rank (int | Unset):  Default: 32.
        target_modules (list[str] | str | Unset):  Default: 'all-linear'.
    """

    alpha: int | Unset = 16
    rank: int | Unset = 32
    target_modules: list[str] | str | Unset = "all-linear"

    def to_dict(self) -> dict[str, Any]:
        alpha = self.alpha

        rank = self.rank

        target_modules: list[str] | str | Unset
        if isinstance(self.target_modules, Unset):
            target_modules = UNSET
        elif isinstance(self.target_modules, list):
            target_modules = self.target_modules

        else:
            target_modules = self.target_modules

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if alpha is not UNSET:
            field_dict["alpha"] = alpha
        if rank is not UNSET:
            field_dict["rank"] = rank
        if target_modules is not UNSET:
            field_dict["target_modules"] = target_modules

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        alpha = d.pop("alpha", UNSET)

        rank = d.pop("rank", UNSET)

        def _parse_target_modules(data: object) -> list[str] | str | Unset:
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                target_modules_type_1 = cast(list[str], data)

                return target_modules_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[str] | str | Unset, data)

        target_modules = _parse_target_modules(d.pop("target_modules", UNSET))

        lora_spec = cls(
            alpha=alpha,
            rank=rank,
            target_modules=target_modules,
        )

        return lora_spec
