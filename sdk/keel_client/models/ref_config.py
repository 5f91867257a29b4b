from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="RefConfig")


@_attrs_define
class RefConfig:
    """The reference policy's workers (VERL: `actor_rollout_ref.ref`).

    Attributes:
        ulysses_sequence_parallel_size (int | Unset): Workers that split every packed row's tokens (Ulysses: all-to-all
            over attention heads); the
            data-parallel size is `resources.num_workers / this`. Needs `model.use_remove_padding`, must divide
            `resources.num_workers` and the model's attention and key/value heads. Default: 1.
    """

    ulysses_sequence_parallel_size: int | Unset = 1

    def to_dict(self) -> dict[str, Any]:
        ulysses_sequence_parallel_size = self.ulysses_sequence_parallel_size

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if ulysses_sequence_parallel_size is not UNSET:
            field_dict["ulysses_sequence_parallel_size"] = ulysses_sequence_parallel_size

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        ulysses_sequence_parallel_size = d.pop("ulysses_sequence_parallel_size", UNSET)

        ref_config = cls(
            ulysses_sequence_parallel_size=ulysses_sequence_parallel_size,
        )

        return ref_config
