from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.actor_config_kl_loss_type import ActorConfigKlLossType
from ..models.actor_config_loss_agg_mode import ActorConfigLossAggMode
from ..models.actor_config_strategy import ActorConfigStrategy
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.actor_optim_config import ActorOptimConfig
    from ..models.fsdp_config import FSDPConfig


T = TypeVar("T", bound="ActorConfig")


@_attrs_define
class ActorConfig:
    """PPO actor update (VERL: `actor_rollout_ref.actor`).

    Attributes:
        clip_ratio (float | Unset):  Default: 0.2.
        clip_ratio_c (float | Unset): Dual-clip bound for negative advantages (Ye et al. 2020); must be > 1. Default:
            3.0.
        clip_ratio_high (float | None | Unset): Defaults to `clip_ratio`.
        clip_ratio_low (float | None | Unset): Defaults to `clip_ratio`.
        entropy_coeff (float | Unset):  Default: 0.0.
        fsdp_config (FSDPConfig | Unset): FSDP2 options (VERL: `fsdp_config`); they apply with `strategy: fsdp2` only.
        kl_loss_coef (float | Unset):  Default: 0.001.
        kl_loss_type (ActorConfigKlLossType | Unset):  Default: ActorConfigKlLossType.LOW_VAR_KL.
        loss_agg_mode (ActorConfigLossAggMode | Unset):  Default: ActorConfigLossAggMode.TOKEN_MEAN.
        optim (ActorOptimConfig | Unset): `OptimConfig` for the PPO actor (a smaller learning rate).
        ppo_epochs (int | Unset):  Default: 4.
        ppo_max_token_len_per_gpu (int | Unset): Token budget per micro-batch (about 3x the sequence length). Default:
            3072.
        ppo_micro_batch_size_per_gpu (int | Unset): Samples per forward pass; at most `ppo_mini_batch_size * rollout.n`.
            Default: 2.
        ppo_mini_batch_size (int | Unset): Prompts per optimizer step (times `rollout.n` samples); at most
            `data.train_batch_size`. Default: 64.
        strategy (ActorConfigStrategy | Unset): `ddp` or `fsdp2` for the actor's data-parallel workers (see
            `ModelConfig.strategy`). Default: ActorConfigStrategy.DDP.
        ulysses_sequence_parallel_size (int | Unset): Workers that split every packed row's tokens (Ulysses: all-to-all
            over attention heads); the
            data-parallel size is `resources.num_workers / this`. Needs `model.use_remove_padding`, must divide
            `resources.num_workers` and the model's attention and key/value heads. Default: 1.
        use_dynamic_bsz (bool | Unset):  Default: True.
        use_kl_loss (bool | Unset):  Default: False.
    """

    clip_ratio: float | Unset = 0.2
    clip_ratio_c: float | Unset = 3.0
    clip_ratio_high: float | None | Unset = UNSET
    clip_ratio_low: float | None | Unset = UNSET
    entropy_coeff: float | Unset = 0.0
    fsdp_config: FSDPConfig | Unset = UNSET
    kl_loss_coef: float | Unset = 0.001
    kl_loss_type: ActorConfigKlLossType | Unset = ActorConfigKlLossType.LOW_VAR_KL
    loss_agg_mode: ActorConfigLossAggMode | Unset = ActorConfigLossAggMode.TOKEN_MEAN
    optim: ActorOptimConfig | Unset = UNSET
    ppo_epochs: int | Unset = 4
    ppo_max_token_len_per_gpu: int | Unset = 3072
    ppo_micro_batch_size_per_gpu: int | Unset = 2
    ppo_mini_batch_size: int | Unset = 64
    strategy: ActorConfigStrategy | Unset = ActorConfigStrategy.DDP
    ulysses_sequence_parallel_size: int | Unset = 1
    use_dynamic_bsz: bool | Unset = True
    use_kl_loss: bool | Unset = False

    def to_dict(self) -> dict[str, Any]:
        clip_ratio = self.clip_ratio

        clip_ratio_c = self.clip_ratio_c

        clip_ratio_high: float | None | Unset
        if isinstance(self.clip_ratio_high, Unset):
            clip_ratio_high = UNSET
        else:
            clip_ratio_high = self.clip_ratio_high

        clip_ratio_low: float | None | Unset
        if isinstance(self.clip_ratio_low, Unset):
            clip_ratio_low = UNSET
        else:
            clip_ratio_low = self.clip_ratio_low

        entropy_coeff = self.entropy_coeff

        fsdp_config: dict[str, Any] | Unset = UNSET
        if not isinstance(self.fsdp_config, Unset):
            fsdp_config = self.fsdp_config.to_dict()

        kl_loss_coef = self.kl_loss_coef

        kl_loss_type: str | Unset = UNSET
        if not isinstance(self.kl_loss_type, Unset):
            kl_loss_type = self.kl_loss_type.value

        loss_agg_mode: str | Unset = UNSET
        if not isinstance(self.loss_agg_mode, Unset):
            loss_agg_mode = self.loss_agg_mode.value

        optim: dict[str, Any] | Unset = UNSET
        if not isinstance(self.optim, Unset):
            optim = self.optim.to_dict()

        ppo_epochs = self.ppo_epochs

        ppo_max_token_len_per_gpu = self.ppo_max_token_len_per_gpu

        ppo_micro_batch_size_per_gpu = self.ppo_micro_batch_size_per_gpu

        ppo_mini_batch_size = self.ppo_mini_batch_size

        strategy: str | Unset = UNSET
        if not isinstance(self.strategy, Unset):
            strategy = self.strategy.value

        ulysses_sequence_parallel_size = self.ulysses_sequence_parallel_size

        use_dynamic_bsz = self.use_dynamic_bsz

        use_kl_loss = self.use_kl_loss

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if clip_ratio is not UNSET:
            field_dict["clip_ratio"] = clip_ratio
        if clip_ratio_c is not UNSET:
            field_dict["clip_ratio_c"] = clip_ratio_c
        if clip_ratio_high is not UNSET:
            field_dict["clip_ratio_high"] = clip_ratio_high
        if clip_ratio_low is not UNSET:
            field_dict["clip_ratio_low"] = clip_ratio_low
        if entropy_coeff is not UNSET:
            field_dict["entropy_coeff"] = entropy_coeff
        if fsdp_config is not UNSET:
            field_dict["fsdp_config"] = fsdp_config
        if kl_loss_coef is not UNSET:
            field_dict["kl_loss_coef"] = kl_loss_coef
        if kl_loss_type is not UNSET:
            field_dict["kl_loss_type"] = kl_loss_type
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
        if use_kl_loss is not UNSET:
            field_dict["use_kl_loss"] = use_kl_loss

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.actor_optim_config import ActorOptimConfig  # noqa: PLC0415
        from ..models.fsdp_config import FSDPConfig  # noqa: PLC0415

        d = dict(src_dict)
        clip_ratio = d.pop("clip_ratio", UNSET)

        clip_ratio_c = d.pop("clip_ratio_c", UNSET)

        def _parse_clip_ratio_high(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        clip_ratio_high = _parse_clip_ratio_high(d.pop("clip_ratio_high", UNSET))

        def _parse_clip_ratio_low(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        clip_ratio_low = _parse_clip_ratio_low(d.pop("clip_ratio_low", UNSET))

        entropy_coeff = d.pop("entropy_coeff", UNSET)

        _fsdp_config = d.pop("fsdp_config", UNSET)
        fsdp_config: FSDPConfig | Unset
        if isinstance(_fsdp_config, Unset):
            fsdp_config = UNSET
        else:
            fsdp_config = FSDPConfig.from_dict(_fsdp_config)

        kl_loss_coef = d.pop("kl_loss_coef", UNSET)

        _kl_loss_type = d.pop("kl_loss_type", UNSET)
        kl_loss_type: ActorConfigKlLossType | Unset
        if isinstance(_kl_loss_type, Unset):
            kl_loss_type = UNSET
        else:
            kl_loss_type = ActorConfigKlLossType(_kl_loss_type)

        _loss_agg_mode = d.pop("loss_agg_mode", UNSET)
        loss_agg_mode: ActorConfigLossAggMode | Unset
        if isinstance(_loss_agg_mode, Unset):
            loss_agg_mode = UNSET
        else:
            loss_agg_mode = ActorConfigLossAggMode(_loss_agg_mode)

        _optim = d.pop("optim", UNSET)
        optim: ActorOptimConfig | Unset
        if isinstance(_optim, Unset):
            optim = UNSET
        else:
            optim = ActorOptimConfig.from_dict(_optim)

        ppo_epochs = d.pop("ppo_epochs", UNSET)

        ppo_max_token_len_per_gpu = d.pop("ppo_max_token_len_per_gpu", UNSET)

        ppo_micro_batch_size_per_gpu = d.pop("ppo_micro_batch_size_per_gpu", UNSET)

        ppo_mini_batch_size = d.pop("ppo_mini_batch_size", UNSET)

        _strategy = d.pop("strategy", UNSET)
        strategy: ActorConfigStrategy | Unset
        if isinstance(_strategy, Unset):
            strategy = UNSET
        else:
            strategy = ActorConfigStrategy(_strategy)

        ulysses_sequence_parallel_size = d.pop("ulysses_sequence_parallel_size", UNSET)

        use_dynamic_bsz = d.pop("use_dynamic_bsz", UNSET)

        use_kl_loss = d.pop("use_kl_loss", UNSET)

        actor_config = cls(
            clip_ratio=clip_ratio,
            clip_ratio_c=clip_ratio_c,
            clip_ratio_high=clip_ratio_high,
            clip_ratio_low=clip_ratio_low,
            entropy_coeff=entropy_coeff,
            fsdp_config=fsdp_config,
            kl_loss_coef=kl_loss_coef,
            kl_loss_type=kl_loss_type,
            loss_agg_mode=loss_agg_mode,
            optim=optim,
            ppo_epochs=ppo_epochs,
            ppo_max_token_len_per_gpu=ppo_max_token_len_per_gpu,
            ppo_micro_batch_size_per_gpu=ppo_micro_batch_size_per_gpu,
            ppo_mini_batch_size=ppo_mini_batch_size,
            strategy=strategy,
            ulysses_sequence_parallel_size=ulysses_sequence_parallel_size,
            use_dynamic_bsz=use_dynamic_bsz,
            use_kl_loss=use_kl_loss,
        )

        return actor_config
