from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.sampling_params import SamplingParams


T = TypeVar("T", bound="SampleRequest")


@_attrs_define
class SampleRequest:
    """Generate from the trainer's current weights, or from a `save_weights_for_sampler` snapshot.

    Attributes:
        prompts (list[list[int] | str]): Token ids, or text (tokenized by the model's tokenizer, no chat template).
        num_samples (int | Unset): Samples per prompt. Default: 1.
        sampler_path (None | str | Unset):
        sampling_params (SamplingParams | Unset):
    """

    prompts: list[list[int] | str]
    num_samples: int | Unset = 1
    sampler_path: None | str | Unset = UNSET
    sampling_params: SamplingParams | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        prompts = []
        for prompts_item_data in self.prompts:
            prompts_item: list[int] | str
            if isinstance(prompts_item_data, list):
                prompts_item = prompts_item_data

            else:
                prompts_item = prompts_item_data
            prompts.append(prompts_item)

        num_samples = self.num_samples

        sampler_path: None | str | Unset
        if isinstance(self.sampler_path, Unset):
            sampler_path = UNSET
        else:
            sampler_path = self.sampler_path

        sampling_params: dict[str, Any] | Unset = UNSET
        if not isinstance(self.sampling_params, Unset):
            sampling_params = self.sampling_params.to_dict()

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "prompts": prompts,
            }
        )
        if num_samples is not UNSET:
            field_dict["num_samples"] = num_samples
        if sampler_path is not UNSET:
            field_dict["sampler_path"] = sampler_path
        if sampling_params is not UNSET:
            field_dict["sampling_params"] = sampling_params

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.sampling_params import SamplingParams  # noqa: PLC0415

        d = dict(src_dict)
        prompts = []
        _prompts = d.pop("prompts")
        for prompts_item_data in _prompts:

            def _parse_prompts_item(data: object) -> list[int] | str:
                try:
                    if not isinstance(data, list):
                        raise TypeError()
                    prompts_item_type_0 = cast(list[int], data)

                    return prompts_item_type_0
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                return cast(list[int] | str, data)

            prompts_item = _parse_prompts_item(prompts_item_data)

            prompts.append(prompts_item)

        num_samples = d.pop("num_samples", UNSET)

        def _parse_sampler_path(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        sampler_path = _parse_sampler_path(d.pop("sampler_path", UNSET))

        _sampling_params = d.pop("sampling_params", UNSET)
        sampling_params: SamplingParams | Unset
        if isinstance(_sampling_params, Unset):
            sampling_params = UNSET
        else:
            sampling_params = SamplingParams.from_dict(_sampling_params)

        sample_request = cls(
            prompts=prompts,
            num_samples=num_samples,
            sampler_path=sampler_path,
            sampling_params=sampling_params,
        )

        return sample_request
