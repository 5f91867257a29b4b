from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..models.eval_data_config_truncation import EvalDataConfigTruncation
from ..types import UNSET, Unset

T = TypeVar("T", bound="EvalDataConfig")


@_attrs_define
class EvalDataConfig:
    """What an evaluation reads, and how long its generations may be (VERL `data` names).

    Attributes:
        filter_overlong_prompts (bool | Unset): Drop prompts longer than `max_prompt_length` (before any truncation).
            Default: False.
        max_prompt_length (int | Unset):  Default: 1024.
        max_response_length (int | Unset):  Default: 2048.
        truncation (EvalDataConfigTruncation | Unset):  Default: EvalDataConfigTruncation.ERROR.
        val_batch_size (int | Unset): Prompts generated per batch (each `rollout.n` times), split over the workers.
            Default: 64.
    """

    filter_overlong_prompts: bool | Unset = False
    max_prompt_length: int | Unset = 1024
    max_response_length: int | Unset = 2048
    truncation: EvalDataConfigTruncation | Unset = EvalDataConfigTruncation.ERROR
    val_batch_size: int | Unset = 64

    def to_dict(self) -> dict[str, Any]:
        filter_overlong_prompts = self.filter_overlong_prompts

        max_prompt_length = self.max_prompt_length

        max_response_length = self.max_response_length

        truncation: str | Unset = UNSET
        if not isinstance(self.truncation, Unset):
            truncation = self.truncation.value

        val_batch_size = self.val_batch_size

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if filter_overlong_prompts is not UNSET:
            field_dict["filter_overlong_prompts"] = filter_overlong_prompts
        if max_prompt_length is not UNSET:
            field_dict["max_prompt_length"] = max_prompt_length
        if max_response_length is not UNSET:
            field_dict["max_response_length"] = max_response_length
        if truncation is not UNSET:
            field_dict["truncation"] = truncation
        if val_batch_size is not UNSET:
            field_dict["val_batch_size"] = val_batch_size

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        filter_overlong_prompts = d.pop("filter_overlong_prompts", UNSET)

        max_prompt_length = d.pop("max_prompt_length", UNSET)

        max_response_length = d.pop("max_response_length", UNSET)

        _truncation = d.pop("truncation", UNSET)
        truncation: EvalDataConfigTruncation | Unset
        if isinstance(_truncation, Unset):
            truncation = UNSET
        else:
            truncation = EvalDataConfigTruncation(_truncation)

        val_batch_size = d.pop("val_batch_size", UNSET)

        eval_data_config = cls(
            filter_overlong_prompts=filter_overlong_prompts,
            max_prompt_length=max_prompt_length,
            max_response_length=max_response_length,
            truncation=truncation,
            val_batch_size=val_batch_size,
        )

        return eval_data_config
