from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..models.rollout_config_name import RolloutConfigName
from ..types import UNSET, Unset

T = TypeVar("T", bound="RolloutConfig")


@_attrs_define
class RolloutConfig:
    """Sampling (VERL: `actor_rollout_ref.rollout`).

    Attributes:
        do_sample (bool | Unset):  Default: True.
        n (int | Unset): Samples per prompt. Default: 5.
        name (RolloutConfigName | Unset):  Default: RolloutConfigName.HF.
        temperature (float | Unset):  Default: 1.0.
        top_k (int | Unset): -1 disables top-k. Default: -1.
        top_p (float | Unset):  Default: 1.0.
        val_temperature (float | Unset): Validation decoding temperature (0 = greedy). Default: 0.0.
    """

    do_sample: bool | Unset = True
    n: int | Unset = 5
    name: RolloutConfigName | Unset = RolloutConfigName.HF
    temperature: float | Unset = 1.0
    top_k: int | Unset = -1
    top_p: float | Unset = 1.0
    val_temperature: float | Unset = 0.0

    def to_dict(self) -> dict[str, Any]:
        do_sample = self.do_sample

        n = self.n

        name: str | Unset = UNSET
        if not isinstance(self.name, Unset):
            name = self.name.value

        temperature = self.temperature

        top_k = self.top_k

        top_p = self.top_p

        val_temperature = self.val_temperature

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if do_sample is not UNSET:
            field_dict["do_sample"] = do_sample
        if n is not UNSET:
            field_dict["n"] = n
        if name is not UNSET:
            field_dict["name"] = name
        if temperature is not UNSET:
            field_dict["temperature"] = temperature
        if top_k is not UNSET:
            field_dict["top_k"] = top_k
        if top_p is not UNSET:
            field_dict["top_p"] = top_p
        if val_temperature is not UNSET:
            field_dict["val_temperature"] = val_temperature

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        do_sample = d.pop("do_sample", UNSET)

        n = d.pop("n", UNSET)

        _name = d.pop("name", UNSET)
        name: RolloutConfigName | Unset
        if isinstance(_name, Unset):
            name = UNSET
        else:
            name = RolloutConfigName(_name)

        temperature = d.pop("temperature", UNSET)

        top_k = d.pop("top_k", UNSET)

        top_p = d.pop("top_p", UNSET)

        val_temperature = d.pop("val_temperature", UNSET)

        rollout_config = cls(
            do_sample=do_sample,
            n=n,
            name=name,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            val_temperature=val_temperature,
        )

        return rollout_config
