from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="EvalRolloutConfig")


@_attrs_define
class EvalRolloutConfig:
    """Sampling (VERL `actor_rollout_ref.rollout` names), with the `hf` backend.

    Attributes:
        n (int | Unset): Samples per prompt; pass@k is reported for k = 1, 2, 4, ... up to n. Default: 1.
        temperature (float | Unset): 0 = greedy. Default: 0.0.
        top_k (int | Unset): -1 disables top-k. Default: -1.
        top_p (float | Unset):  Default: 1.0.
    """

    n: int | Unset = 1
    temperature: float | Unset = 0.0
    top_k: int | Unset = -1
    top_p: float | Unset = 1.0

    def to_dict(self) -> dict[str, Any]:
        n = self.n

        temperature = self.temperature

        top_k = self.top_k

        top_p = self.top_p

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if n is not UNSET:
            field_dict["n"] = n
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
        n = d.pop("n", UNSET)

        temperature = d.pop("temperature", UNSET)

        top_k = d.pop("top_k", UNSET)

        top_p = d.pop("top_p", UNSET)

        eval_rollout_config = cls(
            n=n,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
        )

        return eval_rollout_config
