from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.distill_model_config_dtype import DistillModelConfigDtype
from ..models.distill_model_config_lora_rank_type_1 import DistillModelConfigLoraRankType1
from ..types import UNSET, Unset

T = TypeVar("T", bound="DistillModelConfig")


@_attrs_define
class DistillModelConfig:
    """`ModelConfig` for reward-model distillation: LoRA by default, rank picked by size.

    Attributes:
        dtype (DistillModelConfigDtype | Unset): Parameter dtype; `bfloat16` halves memory, `float32` is exact on CPU.
            Default: DistillModelConfigDtype.FLOAT32.
        enable_gradient_checkpointing (bool | Unset): Recompute activations in backward: less memory, about 30% more
            compute. Default: False.
        lora_adapter_path (None | str | Unset): Continue from an existing adapter directory
            (`adapter_model.safetensors`) under a model root.
        lora_alpha (int | Unset): LoRA scaling numerator (scale = alpha / rank). Default: 16.
        lora_rank (DistillModelConfigLoraRankType1 | int | Unset): 0 = full fine-tuning; `auto` picks by parameter count
            (<1B: 32, <10B: 64, else 128). Default: DistillModelConfigLoraRankType1.AUTO.
        target_modules (list[str] | str | Unset): Modules that get adapters; `all-linear` as in the recipe. Default:
            'all-linear'.
        use_remove_padding (bool | Unset): Pack sequences without padding where the attention implementation allows it.
            Default: True.
    """

    dtype: DistillModelConfigDtype | Unset = DistillModelConfigDtype.FLOAT32
    enable_gradient_checkpointing: bool | Unset = False
    lora_adapter_path: None | str | Unset = UNSET
    lora_alpha: int | Unset = 16
    lora_rank: DistillModelConfigLoraRankType1 | int | Unset = DistillModelConfigLoraRankType1.AUTO
    target_modules: list[str] | str | Unset = "all-linear"
    use_remove_padding: bool | Unset = True

    def to_dict(self) -> dict[str, Any]:
        dtype: str | Unset = UNSET
        if not isinstance(self.dtype, Unset):
            dtype = self.dtype.value

        enable_gradient_checkpointing = self.enable_gradient_checkpointing

        lora_adapter_path: None | str | Unset
        if isinstance(self.lora_adapter_path, Unset):
            lora_adapter_path = UNSET
        else:
            lora_adapter_path = self.lora_adapter_path

        lora_alpha = self.lora_alpha

        lora_rank: int | str | Unset
        if isinstance(self.lora_rank, Unset):
            lora_rank = UNSET
        elif isinstance(self.lora_rank, DistillModelConfigLoraRankType1):
            lora_rank = self.lora_rank.value
        else:
            lora_rank = self.lora_rank

        target_modules: list[str] | str | Unset
        if isinstance(self.target_modules, Unset):
            target_modules = UNSET
        elif isinstance(self.target_modules, list):
            target_modules = self.target_modules

        else:
            target_modules = self.target_modules

        use_remove_padding = self.use_remove_padding

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if dtype is not UNSET:
            field_dict["dtype"] = dtype
        if enable_gradient_checkpointing is not UNSET:
            field_dict["enable_gradient_checkpointing"] = enable_gradient_checkpointing
        if lora_adapter_path is not UNSET:
            field_dict["lora_adapter_path"] = lora_adapter_path
        if lora_alpha is not UNSET:
            field_dict["lora_alpha"] = lora_alpha
        if lora_rank is not UNSET:
            field_dict["lora_rank"] = lora_rank
        if target_modules is not UNSET:
            field_dict["target_modules"] = target_modules
        if use_remove_padding is not UNSET:
            field_dict["use_remove_padding"] = use_remove_padding

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        _dtype = d.pop("dtype", UNSET)
        dtype: DistillModelConfigDtype | Unset
        if isinstance(_dtype, Unset):
            dtype = UNSET
        else:
            dtype = DistillModelConfigDtype(_dtype)

        enable_gradient_checkpointing = d.pop("enable_gradient_checkpointing", UNSET)

        def _parse_lora_adapter_path(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        lora_adapter_path = _parse_lora_adapter_path(d.pop("lora_adapter_path", UNSET))

        lora_alpha = d.pop("lora_alpha", UNSET)

        def _parse_lora_rank(data: object) -> DistillModelConfigLoraRankType1 | int | Unset:
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                lora_rank_type_1 = DistillModelConfigLoraRankType1(data)

                return lora_rank_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(DistillModelConfigLoraRankType1 | int | Unset, data)

        lora_rank = _parse_lora_rank(d.pop("lora_rank", UNSET))

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

        use_remove_padding = d.pop("use_remove_padding", UNSET)

        distill_model_config = cls(
            dtype=dtype,
            enable_gradient_checkpointing=enable_gradient_checkpointing,
            lora_adapter_path=lora_adapter_path,
            lora_alpha=lora_alpha,
            lora_rank=lora_rank,
            target_modules=target_modules,
            use_remove_padding=use_remove_padding,
        )

        return distill_model_config
