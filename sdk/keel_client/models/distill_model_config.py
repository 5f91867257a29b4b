from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.distill_model_config_dtype import DistillModelConfigDtype
from ..models.distill_model_config_lora_rank_type_1 import DistillModelConfigLoraRankType1
from ..models.distill_model_config_strategy import DistillModelConfigStrategy
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.fsdp_config import FSDPConfig


T = TypeVar("T", bound="DistillModelConfig")


@_attrs_define
class DistillModelConfig:
    """`ModelConfig` for reward-model distillation: LoRA by default, rank picked by size.

    Attributes:
        dtype (DistillModelConfigDtype | Unset): Compute dtype (autocast). Trained weights and optimizer state stay
            float32 (master copy);
            frozen models (reference, reward, teacher) and a LoRA base are held in this dtype. `float16`
            adds loss scaling; on CPU prefer `bfloat16` (float16 kernels are slow there). Default:
            DistillModelConfigDtype.FLOAT32.
        enable_gradient_checkpointing (bool | Unset): Recompute activations in backward: less memory, about 30% more
            compute. Default: False.
        fsdp_config (FSDPConfig | Unset): FSDP2 options (VERL: `fsdp_config`); they apply with `strategy: fsdp2` only.
        lora_adapter_path (None | str | Unset): Continue from an existing adapter directory
            (`adapter_model.safetensors`) under a model root.
        lora_alpha (int | Unset): LoRA scaling numerator (scale = alpha / rank). Default: 16.
        lora_rank (DistillModelConfigLoraRankType1 | int | Unset): 0 = full fine-tuning; `auto` picks by parameter count
            (<1B: 32, <10B: 64, else 128). Default: DistillModelConfigLoraRankType1.AUTO.
        strategy (DistillModelConfigStrategy | Unset): Data parallelism of SFT / reward-model / distillation workers:
            `ddp` (full replicas,
            gradients all-reduced) or `fsdp2` (parameters, gradients and optimizer state sharded; not with
            LoRA: `lora_rank` 0, no `lora_adapter_path`). PPO sets it per role (`actor.strategy`,
            `critic.strategy`) and needs `ddp` here. Default: DistillModelConfigStrategy.DDP.
        target_modules (list[str] | str | Unset): Modules that get adapters; `all-linear` as in the recipe. Default:
            'all-linear'.
        use_remove_padding (bool | Unset): Pack each micro-batch into one row without padding (positions restart per
            sequence, attention
            stays inside each sequence; the token budget counts real tokens). Models whose attention does
            not go through transformers' attention interface keep padding. Default: True.
    """

    dtype: DistillModelConfigDtype | Unset = DistillModelConfigDtype.FLOAT32
    enable_gradient_checkpointing: bool | Unset = False
    fsdp_config: FSDPConfig | Unset = UNSET
    lora_adapter_path: None | str | Unset = UNSET
    lora_alpha: int | Unset = 16
    lora_rank: DistillModelConfigLoraRankType1 | int | Unset = DistillModelConfigLoraRankType1.AUTO
    strategy: DistillModelConfigStrategy | Unset = DistillModelConfigStrategy.DDP
    target_modules: list[str] | str | Unset = "all-linear"
    use_remove_padding: bool | Unset = True

    def to_dict(self) -> dict[str, Any]:
        dtype: str | Unset = UNSET
        if not isinstance(self.dtype, Unset):
            dtype = self.dtype.value

        enable_gradient_checkpointing = self.enable_gradient_checkpointing

        fsdp_config: dict[str, Any] | Unset = UNSET
        if not isinstance(self.fsdp_config, Unset):
            fsdp_config = self.fsdp_config.to_dict()

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

        strategy: str | Unset = UNSET
        if not isinstance(self.strategy, Unset):
            strategy = self.strategy.value

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
        if fsdp_config is not UNSET:
            field_dict["fsdp_config"] = fsdp_config
        if lora_adapter_path is not UNSET:
            field_dict["lora_adapter_path"] = lora_adapter_path
        if lora_alpha is not UNSET:
            field_dict["lora_alpha"] = lora_alpha
        if lora_rank is not UNSET:
            field_dict["lora_rank"] = lora_rank
        if strategy is not UNSET:
            field_dict["strategy"] = strategy
        if target_modules is not UNSET:
            field_dict["target_modules"] = target_modules
        if use_remove_padding is not UNSET:
            field_dict["use_remove_padding"] = use_remove_padding

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.fsdp_config import FSDPConfig  # noqa: PLC0415

        d = dict(src_dict)
        _dtype = d.pop("dtype", UNSET)
        dtype: DistillModelConfigDtype | Unset
        if isinstance(_dtype, Unset):
            dtype = UNSET
        else:
            dtype = DistillModelConfigDtype(_dtype)

        enable_gradient_checkpointing = d.pop("enable_gradient_checkpointing", UNSET)

        _fsdp_config = d.pop("fsdp_config", UNSET)
        fsdp_config: FSDPConfig | Unset
        if isinstance(_fsdp_config, Unset):
            fsdp_config = UNSET
        else:
            fsdp_config = FSDPConfig.from_dict(_fsdp_config)

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

        _strategy = d.pop("strategy", UNSET)
        strategy: DistillModelConfigStrategy | Unset
        if isinstance(_strategy, Unset):
            strategy = UNSET
        else:
            strategy = DistillModelConfigStrategy(_strategy)

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
            fsdp_config=fsdp_config,
            lora_adapter_path=lora_adapter_path,
            lora_alpha=lora_alpha,
            lora_rank=lora_rank,
            strategy=strategy,
            target_modules=target_modules,
            use_remove_padding=use_remove_padding,
        )

        return distill_model_config
