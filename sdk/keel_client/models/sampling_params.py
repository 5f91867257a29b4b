from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="SamplingParams")


@_attrs_define
class SamplingParams:
    """
    Attributes:
        max_tokens (int | Unset):  Default: 16.
        seed (int | None | Unset):
        stop (list[int | str] | Unset): Stop strings or token ids (the end-of-sequence token always stops).
        temperature (float | Unset): 0 = greedy. Default: 1.0.
        top_k (int | Unset): 0 = no top-k. Default: 0.
        top_p (float | Unset):  Default: 1.0.
    """

    max_tokens: int | Unset = 16
    seed: int | None | Unset = UNSET
    stop: list[int | str] | Unset = UNSET
    temperature: float | Unset = 1.0
    top_k: int | Unset = 0
    top_p: float | Unset = 1.0

    def to_dict(self) -> dict[str, Any]:
        max_tokens = self.max_tokens

        seed: int | None | Unset
        if isinstance(self.seed, Unset):
            seed = UNSET
        else:
            seed = self.seed

        stop: list[int | str] | Unset = UNSET
        if not isinstance(self.stop, Unset):
            stop = []
            for stop_item_data in self.stop:
                stop_item: int | str
                stop_item = stop_item_data
                stop.append(stop_item)

        temperature = self.temperature

        top_k = self.top_k

        top_p = self.top_p

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if max_tokens is not UNSET:
            field_dict["max_tokens"] = max_tokens
        if seed is not UNSET:
            field_dict["seed"] = seed
        if stop is not UNSET:
            field_dict["stop"] = stop
        if temperature is not UNSET:
            field_dict["temperature"] = temperature
        if top_k is not UNSET:
            field_dict["top_k"] = top_k
        if top_p is not UNSET:
            field_dict["top_p"] = top_p

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        max_tokens = d.pop("max_tokens", UNSET)

        def _parse_seed(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        seed = _parse_seed(d.pop("seed", UNSET))

        _stop = d.pop("stop", UNSET)
        stop: list[int | str] | Unset = UNSET
        if _stop is not UNSET:
            stop = []
            for stop_item_data in _stop:

                def _parse_stop_item(data: object) -> int | str:
                    return cast(int | str, data)

                stop_item = _parse_stop_item(stop_item_data)

                stop.append(stop_item)

        temperature = d.pop("temperature", UNSET)

        top_k = d.pop("top_k", UNSET)

        top_p = d.pop("top_p", UNSET)

        sampling_params = cls(
            max_tokens=max_tokens,
            seed=seed,
            stop=stop,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
        )

        return sampling_params
