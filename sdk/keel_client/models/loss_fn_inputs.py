from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="LossFnInputs")


@_attrs_define
class LossFnInputs:
    """Per-position inputs of the loss, each as long as the datum's `model_input`.

    Attributes:
        advantages (list[float] | None | Unset): `importance_sampling`, `ppo`, `cispo`, `dro` (0: the position counts
            for nothing).
        logprobs (list[float] | None | Unset): The sampler's log-probabilities of `target_tokens`:
            `importance_sampling`, `ppo`, `cispo`, `dro`.
        ref_logprobs (list[float] | None | Unset): `dpo`: the reference model's log-probabilities (default: computed
            from the trainer's reference).
        target_tokens (list[int] | None | Unset): The token each position predicts (every `loss_fn`).
        weights (list[float] | None | Unset): Loss weight per position (0 masks it): `cross_entropy` and `dpo`.
    """

    advantages: list[float] | None | Unset = UNSET
    logprobs: list[float] | None | Unset = UNSET
    ref_logprobs: list[float] | None | Unset = UNSET
    target_tokens: list[int] | None | Unset = UNSET
    weights: list[float] | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        advantages: list[float] | None | Unset
        if isinstance(self.advantages, Unset):
            advantages = UNSET
        elif isinstance(self.advantages, list):
            advantages = self.advantages

        else:
            advantages = self.advantages

        logprobs: list[float] | None | Unset
        if isinstance(self.logprobs, Unset):
            logprobs = UNSET
        elif isinstance(self.logprobs, list):
            logprobs = self.logprobs

        else:
            logprobs = self.logprobs

        ref_logprobs: list[float] | None | Unset
        if isinstance(self.ref_logprobs, Unset):
            ref_logprobs = UNSET
        elif isinstance(self.ref_logprobs, list):
            ref_logprobs = self.ref_logprobs

        else:
            ref_logprobs = self.ref_logprobs

        target_tokens: list[int] | None | Unset
        if isinstance(self.target_tokens, Unset):
            target_tokens = UNSET
        elif isinstance(self.target_tokens, list):
            target_tokens = self.target_tokens

        else:
            target_tokens = self.target_tokens

        weights: list[float] | None | Unset
        if isinstance(self.weights, Unset):
            weights = UNSET
        elif isinstance(self.weights, list):
            weights = self.weights

        else:
            weights = self.weights

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if advantages is not UNSET:
            field_dict["advantages"] = advantages
        if logprobs is not UNSET:
            field_dict["logprobs"] = logprobs
        if ref_logprobs is not UNSET:
            field_dict["ref_logprobs"] = ref_logprobs
        if target_tokens is not UNSET:
            field_dict["target_tokens"] = target_tokens
        if weights is not UNSET:
            field_dict["weights"] = weights

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)

        def _parse_advantages(data: object) -> list[float] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                advantages_type_0 = cast(list[float], data)

                return advantages_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[float] | None | Unset, data)

        advantages = _parse_advantages(d.pop("advantages", UNSET))

        def _parse_logprobs(data: object) -> list[float] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                logprobs_type_0 = cast(list[float], data)

                return logprobs_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[float] | None | Unset, data)

        logprobs = _parse_logprobs(d.pop("logprobs", UNSET))

        def _parse_ref_logprobs(data: object) -> list[float] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                ref_logprobs_type_0 = cast(list[float], data)

                return ref_logprobs_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[float] | None | Unset, data)

        ref_logprobs = _parse_ref_logprobs(d.pop("ref_logprobs", UNSET))

        def _parse_target_tokens(data: object) -> list[int] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                target_tokens_type_0 = cast(list[int], data)

                return target_tokens_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[int] | None | Unset, data)

        target_tokens = _parse_target_tokens(d.pop("target_tokens", UNSET))

        def _parse_weights(data: object) -> list[float] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                weights_type_0 = cast(list[float], data)

                return weights_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[float] | None | Unset, data)

        weights = _parse_weights(d.pop("weights", UNSET))

        loss_fn_inputs = cls(
            advantages=advantages,
            logprobs=logprobs,
            ref_logprobs=ref_logprobs,
            target_tokens=target_tokens,
            weights=weights,
        )

        return loss_fn_inputs
