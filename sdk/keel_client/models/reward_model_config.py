from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.data_config import DataConfig
    from ..models.model_config import ModelConfig
    from ..models.optim_config import OptimConfig
    from ..models.step_guardrail_config import StepGuardrailConfig
    from ..models.trainer_config import TrainerConfig


T = TypeVar("T", bound="RewardModelConfig")


@_attrs_define
class RewardModelConfig:
    """Bradley-Terry reward model: -log sigmoid(r_chosen - r_rejected - margin).

    Attributes:
        center_rewards_coefficient (float | Unset): Weight of the mean((r_c + r_r)^2) term that keeps scores centred on
            0 (Eisenstein et al.). Default: 0.0.
        data (DataConfig | Unset): Batching and lengths (VERL: `data`).
        guardrails (StepGuardrailConfig | Unset): The step watchdog of SFT, reward-model training and distillation (PPO:
            `GuardrailConfig`).
        max_token_len_per_gpu (int | Unset):  Default: 3072.
        micro_batch_size_per_gpu (int | Unset): Rows per forward pass; at most `data.train_batch_size`. Default: 2.
        model (ModelConfig | Unset): How the trained model is loaded (VERL: `actor_rollout_ref.model`).
        optim (OptimConfig | Unset): AdamW with warm-up and a schedule (VERL: `optim`).
        trainer (TrainerConfig | Unset): Loop length and cadence (VERL: `trainer`).
        ulysses_sequence_parallel_size (int | Unset): Workers that split every packed row's tokens (Ulysses: all-to-all
            over attention heads); the
            data-parallel size is `resources.num_workers / this`. Needs `model.use_remove_padding`, must divide
            `resources.num_workers` and the model's attention and key/value heads. Default: 1.
        use_dynamic_bsz (bool | Unset):  Default: True.
    """

    center_rewards_coefficient: float | Unset = 0.0
    data: DataConfig | Unset = UNSET
    guardrails: StepGuardrailConfig | Unset = UNSET
    max_token_len_per_gpu: int | Unset = 3072
    micro_batch_size_per_gpu: int | Unset = 2
    model: ModelConfig | Unset = UNSET
    optim: OptimConfig | Unset = UNSET
    trainer: TrainerConfig | Unset = UNSET
    ulysses_sequence_parallel_size: int | Unset = 1
    use_dynamic_bsz: bool | Unset = True

    def to_dict(self) -> dict[str, Any]:
        center_rewards_coefficient = self.center_rewards_coefficient

        data: dict[str, Any] | Unset = UNSET
        if not isinstance(self.data, Unset):
            data = self.data.to_dict()

        guardrails: dict[str, Any] | Unset = UNSET
        if not isinstance(self.guardrails, Unset):
            guardrails = self.guardrails.to_dict()

        max_token_len_per_gpu = self.max_token_len_per_gpu

        micro_batch_size_per_gpu = self.micro_batch_size_per_gpu

        model: dict[str, Any] | Unset = UNSET
        if not isinstance(self.model, Unset):
            model = self.model.to_dict()

        optim: dict[str, Any] | Unset = UNSET
        if not isinstance(self.optim, Unset):
            optim = self.optim.to_dict()

        trainer: dict[str, Any] | Unset = UNSET
        if not isinstance(self.trainer, Unset):
            trainer = self.trainer.to_dict()

        ulysses_sequence_parallel_size = self.ulysses_sequence_parallel_size

        use_dynamic_bsz = self.use_dynamic_bsz

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if center_rewards_coefficient is not UNSET:
            field_dict["center_rewards_coefficient"] = center_rewards_coefficient
        if data is not UNSET:
            field_dict["data"] = data
        if guardrails is not UNSET:
            field_dict["guardrails"] = guardrails
        if max_token_len_per_gpu is not UNSET:
            field_dict["max_token_len_per_gpu"] = max_token_len_per_gpu
        if micro_batch_size_per_gpu is not UNSET:
            field_dict["micro_batch_size_per_gpu"] = micro_batch_size_per_gpu
        if model is not UNSET:
            field_dict["model"] = model
        if optim is not UNSET:
            field_dict["optim"] = optim
        if trainer is not UNSET:
            field_dict["trainer"] = trainer
        if ulysses_sequence_parallel_size is not UNSET:
            field_dict["ulysses_sequence_parallel_size"] = ulysses_sequence_parallel_size
        if use_dynamic_bsz is not UNSET:
            field_dict["use_dynamic_bsz"] = use_dynamic_bsz

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.data_config import DataConfig  # noqa: PLC0415
        from ..models.model_config import ModelConfig  # noqa: PLC0415
        from ..models.optim_config import OptimConfig  # noqa: PLC0415
        from ..models.step_guardrail_config import StepGuardrailConfig  # noqa: PLC0415
        from ..models.trainer_config import TrainerConfig  # noqa: PLC0415

        d = dict(src_dict)
        center_rewards_coefficient = d.pop("center_rewards_coefficient", UNSET)

        _data = d.pop("data", UNSET)
        data: DataConfig | Unset
        if isinstance(_data, Unset):
            data = UNSET
        else:
            data = DataConfig.from_dict(_data)

        _guardrails = d.pop("guardrails", UNSET)
        guardrails: StepGuardrailConfig | Unset
        if isinstance(_guardrails, Unset):
            guardrails = UNSET
        else:
            guardrails = StepGuardrailConfig.from_dict(_guardrails)

        max_token_len_per_gpu = d.pop("max_token_len_per_gpu", UNSET)

        micro_batch_size_per_gpu = d.pop("micro_batch_size_per_gpu", UNSET)

        _model = d.pop("model", UNSET)
        model: ModelConfig | Unset
        if isinstance(_model, Unset):
            model = UNSET
        else:
            model = ModelConfig.from_dict(_model)

        _optim = d.pop("optim", UNSET)
        optim: OptimConfig | Unset
        if isinstance(_optim, Unset):
            optim = UNSET
        else:
            optim = OptimConfig.from_dict(_optim)

        _trainer = d.pop("trainer", UNSET)
        trainer: TrainerConfig | Unset
        if isinstance(_trainer, Unset):
            trainer = UNSET
        else:
            trainer = TrainerConfig.from_dict(_trainer)

        ulysses_sequence_parallel_size = d.pop("ulysses_sequence_parallel_size", UNSET)

        use_dynamic_bsz = d.pop("use_dynamic_bsz", UNSET)

        reward_model_config = cls(
            center_rewards_coefficient=center_rewards_coefficient,
            data=data,
            guardrails=guardrails,
            max_token_len_per_gpu=max_token_len_per_gpu,
            micro_batch_size_per_gpu=micro_batch_size_per_gpu,
            model=model,
            optim=optim,
            trainer=trainer,
            ulysses_sequence_parallel_size=ulysses_sequence_parallel_size,
            use_dynamic_bsz=use_dynamic_bsz,
        )

        return reward_model_config
