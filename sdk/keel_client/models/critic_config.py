from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.critic_config_loss_agg_mode import CriticConfigLossAggMode
from ..models.critic_config_strategy import CriticConfigStrategy
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.fsdp_config import FSDPConfig
    from ..models.optim_config import OptimConfig


T = TypeVar("T", bound="CriticConfig")


@_attrs_define
class CriticConfig:
    """PPO value model (VERL: `critic`).

    Attributes:
        cliprange_value (float | Unset):  Default: 0.5.
        fsdp_config (FSDPConfig | Unset): FSDP2 options (VERL: `fsdp_config`); they apply with `strategy: fsdp2` only.
        loss_agg_mode (CriticConfigLossAggMode | Unset):  Default: CriticConfigLossAggMode.TOKEN_MEAN.
        optim (OptimConfig | Unset): AdamW with warm-up and a schedule (VERL: `optim`).
        ppo_epochs (int | None | Unset): Defaults to the actor's.
        ppo_max_token_len_per_gpu (int | Unset):  Default: 3072.
        ppo_micro_batch_size_per_gpu (int | Unset):  Default: 2.
        ppo_mini_batch_size (int | None | Unset): Defaults to the actor's; at most `data.train_batch_size`.
        strategy (CriticConfigStrategy | Unset): `ddp` or `fsdp2` for the critic's data-parallel workers (see
            `ModelConfig.strategy`). Default: CriticConfigStrategy.DDP.
        ulysses_sequence_parallel_size (int | Unset): Workers that split every packed row's tokens (Ulysses: all-to-all
            over attention heads); the
            data-parallel size is `resources.num_workers / this`. Needs `model.use_remove_padding`, must divide
            `resources.num_workers` and the model's attention and key/value heads. Default: 1.
        use_dynamic_bsz (bool | Unset):  Default: True.
    """

    cliprange_value: float | Unset = 0.5
    fsdp_config: FSDPConfig | Unset = UNSET
    loss_agg_mode: CriticConfigLossAggMode | Unset = CriticConfigLossAggMode.TOKEN_MEAN
    optim: OptimConfig | Unset = UNSET
    ppo_epochs: int | None | Unset = UNSET
    ppo_max_token_len_per_gpu: int | Unset = 3072
    ppo_micro_batch_size_per_gpu: int | Unset = 2
    ppo_mini_batch_size: int | None | Unset = UNSET
    strategy: CriticConfigStrategy | Unset = CriticConfigStrategy.DDP
    ulysses_sequence_parallel_size: int | Unset = 1
    use_dynamic_bsz: bool | Unset = True

    def to_dict(self) -> dict[str, Any]:
        cliprange_value = self.cliprange_value

        fsdp_config: dict[str, Any] | Unset = UNSET
        if not isinstance(self.fsdp_config, Unset):
            fsdp_config = self.fsdp_config.to_dict()

        loss_agg_mode: str | Unset = UNSET
        if not isinstance(self.loss_agg_mode, Unset):
            loss_agg_mode = self.loss_agg_mode.value

        optim: dict[str, Any] | Unset = UNSET
        if not isinstance(self.optim, Unset):
            optim = self.optim.to_dict()

        ppo_epochs: int | None | Unset
        if isinstance(self.ppo_epochs, Unset):
            ppo_epochs = UNSET
        else:
            ppo_epochs = self.ppo_epochs

        ppo_max_token_len_per_gpu = self.ppo_max_token_len_per_gpu

        ppo_micro_batch_size_per_gpu = self.ppo_micro_batch_size_per_gpu

        ppo_mini_batch_size: int | None | Unset
        if isinstance(self.ppo_mini_batch_size, Unset):
            ppo_mini_batch_size = UNSET
        else:
            ppo_mini_batch_size = self.ppo_mini_batch_size

        strategy: str | Unset = UNSET
        if not isinstance(self.strategy, Unset):
            strategy = self.strategy.value

        ulysses_sequence_parallel_size = self.ulysses_sequence_parallel_size

        use_dynamic_bsz = self.use_dynamic_bsz

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if cliprange_value is not UNSET:
            field_dict["cliprange_value"] = cliprange_value
        if fsdp_config is not UNSET:
            field_dict["fsdp_config"] = fsdp_config
        if loss_agg_mode is not UNSET:
            field_dict["loss_agg_mode"] = loss_agg_mode
        if optim is not UNSET:
            field_dict["optim"] = optim
        if ppo_epochs is not UNSET:
            field_dict["ppo_epochs"] = ppo_epochs
        if ppo_max_token_len_per_gpu is not UNSET:
            field_dict["ppo_max_token_len_per_gpu"] = ppo_max_token_len_per_gpu
        if ppo_micro_batch_size_per_gpu is not UNSET:
            field_dict["ppo_micro_batch_size_per_gpu"] = ppo_micro_batch_size_per_gpu
        if ppo_mini_batch_size is not UNSET:
            field_dict["ppo_mini_batch_size"] = ppo_mini_batch_size
        if strategy is not UNSET:
            field_dict["strategy"] = strategy
        if ulysses_sequence_parallel_size is not UNSET:
            field_dict["ulysses_sequence_parallel_size"] = ulysses_sequence_parallel_size
        if use_dynamic_bsz is not UNSET:
            field_dict["use_dynamic_bsz"] = use_dynamic_bsz

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.fsdp_config import FSDPConfig  # noqa: PLC0415
        from ..models.optim_config import OptimConfig  # noqa: PLC0415

        d = dict(src_dict)
        cliprange_value = d.pop("cliprange_value", UNSET)

        _fsdp_config = d.pop("fsdp_config", UNSET)
        fsdp_config: FSDPConfig | Unset
        if isinstance(_fsdp_config, Unset):
            fsdp_config = UNSET
        else:
            fsdp_config = FSDPConfig.from_dict(_fsdp_config)

        _loss_agg_mode = d.pop("loss_agg_mode", UNSET)
        loss_agg_mode: CriticConfigLossAggMode | Unset
        if isinstance(_loss_agg_mode, Unset):
            loss_agg_mode = UNSET
        else:
            loss_agg_mode = CriticConfigLossAggMode(_loss_agg_mode)

        _optim = d.pop("optim", UNSET)
        optim: OptimConfig | Unset
        if isinstance(_optim, Unset):
            optim = UNSET
        else:
            optim = OptimConfig.from_dict(_optim)

        def _parse_ppo_epochs(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ppo_epochs = _parse_ppo_epochs(d.pop("ppo_epochs", UNSET))

        ppo_max_token_len_per_gpu = d.pop("ppo_max_token_len_per_gpu", UNSET)

        ppo_micro_batch_size_per_gpu = d.pop("ppo_micro_batch_size_per_gpu", UNSET)

        def _parse_ppo_mini_batch_size(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ppo_mini_batch_size = _parse_ppo_mini_batch_size(d.pop("ppo_mini_batch_size", UNSET))

        _strategy = d.pop("strategy", UNSET)
        strategy: CriticConfigStrategy | Unset
        if isinstance(_strategy, Unset):
            strategy = UNSET
        else:
            strategy = CriticConfigStrategy(_strategy)

        ulysses_sequence_parallel_size = d.pop("ulysses_sequence_parallel_size", UNSET)

        use_dynamic_bsz = d.pop("use_dynamic_bsz", UNSET)

        critic_config = cls(
            cliprange_value=cliprange_value,
            fsdp_config=fsdp_config,
            loss_agg_mode=loss_agg_mode,
            optim=optim,
            ppo_epochs=ppo_epochs,
            ppo_max_token_len_per_gpu=ppo_max_token_len_per_gpu,
            ppo_micro_batch_size_per_gpu=ppo_micro_batch_size_per_gpu,
            ppo_mini_batch_size=ppo_mini_batch_size,
            strategy=strategy,
            ulysses_sequence_parallel_size=ulysses_sequence_parallel_size,
            use_dynamic_bsz=use_dynamic_bsz,
        )

        return critic_config
