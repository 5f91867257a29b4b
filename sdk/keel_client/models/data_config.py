from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.data_config_truncation import DataConfigTruncation
from ..types import UNSET, Unset

T = TypeVar("T", bound="DataConfig")


@_attrs_define
class DataConfig:
    """Batching and lengths (VERL: `data`).

    Attributes:
        filter_overlong_prompts (bool | Unset): Drop rows whose prompt is longer than `max_prompt_length` (before any
            truncation). Default: False.
        max_length (int | None | Unset): SFT / reward model: cap on prompt+response tokens (defaults to the sum of the
            two above; reward
            model, distillation and DPO with a known context window: the window, at most 3072).
        max_prompt_length (int | Unset): Left out, with a model whose config.json names its context window: half the
            window, at most 1024. Default: 1024.
        max_response_length (int | Unset): Left out, with a known context window: the rest of the window, at most 2048.
            Prompt + response
            (or `max_length`) must fit the window. Default: 2048.
        shuffle (bool | Unset):  Default: True.
        train_batch_size (int | Unset): Rows (pairs, prompts, examples) per optimizer step (PPO: prompts per iteration).
            Default: 64.
        truncation (DataConfigTruncation | Unset): Too-long rows: `error` fails the job at the first; else the prompt is
            cut (`left` keeps its
            end, `right` its start, `middle` both ends) and a response always loses its end. Default:
            DataConfigTruncation.ERROR.
        val_batch_size (int | None | Unset):
    """

    filter_overlong_prompts: bool | Unset = False
    max_length: int | None | Unset = UNSET
    max_prompt_length: int | Unset = 1024
    max_response_length: int | Unset = 2048
    shuffle: bool | Unset = True
    train_batch_size: int | Unset = 64
    truncation: DataConfigTruncation | Unset = DataConfigTruncation.ERROR
    val_batch_size: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        filter_overlong_prompts = self.filter_overlong_prompts

        max_length: int | None | Unset
        if isinstance(self.max_length, Unset):
            max_length = UNSET
        else:
            max_length = self.max_length

        max_prompt_length = self.max_prompt_length

        max_response_length = self.max_response_length

        shuffle = self.shuffle

        train_batch_size = self.train_batch_size

        truncation: str | Unset = UNSET
        if not isinstance(self.truncation, Unset):
            truncation = self.truncation.value

        val_batch_size: int | None | Unset
        if isinstance(self.val_batch_size, Unset):
            val_batch_size = UNSET
        else:
            val_batch_size = self.val_batch_size

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if filter_overlong_prompts is not UNSET:
            field_dict["filter_overlong_prompts"] = filter_overlong_prompts
        if max_length is not UNSET:
            field_dict["max_length"] = max_length
        if max_prompt_length is not UNSET:
            field_dict["max_prompt_length"] = max_prompt_length
        if max_response_length is not UNSET:
            field_dict["max_response_length"] = max_response_length
        if shuffle is not UNSET:
            field_dict["shuffle"] = shuffle
        if train_batch_size is not UNSET:
            field_dict["train_batch_size"] = train_batch_size
        if truncation is not UNSET:
            field_dict["truncation"] = truncation
        if val_batch_size is not UNSET:
            field_dict["val_batch_size"] = val_batch_size

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        filter_overlong_prompts = d.pop("filter_overlong_prompts", UNSET)

        def _parse_max_length(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_length = _parse_max_length(d.pop("max_length", UNSET))

        max_prompt_length = d.pop("max_prompt_length", UNSET)

        max_response_length = d.pop("max_response_length", UNSET)

        shuffle = d.pop("shuffle", UNSET)

        train_batch_size = d.pop("train_batch_size", UNSET)

        _truncation = d.pop("truncation", UNSET)
        truncation: DataConfigTruncation | Unset
        if isinstance(_truncation, Unset):
            truncation = UNSET
        else:
            truncation = DataConfigTruncation(_truncation)

        def _parse_val_batch_size(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        val_batch_size = _parse_val_batch_size(d.pop("val_batch_size", UNSET))

        data_config = cls(
            filter_overlong_prompts=filter_overlong_prompts,
            max_length=max_length,
            max_prompt_length=max_prompt_length,
            max_response_length=max_response_length,
            shuffle=shuffle,
            train_batch_size=train_batch_size,
            truncation=truncation,
            val_batch_size=val_batch_size,
        )

        return data_config
