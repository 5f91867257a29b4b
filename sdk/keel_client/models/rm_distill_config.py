from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define

from ..models.rm_distill_config_loss import RMDistillConfigLoss
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.data_config import DataConfig
    from ..models.distill_model_config import DistillModelConfig
    from ..models.distill_optim_config import DistillOptimConfig
    from ..models.step_guardrail_config import StepGuardrailConfig
    from ..models.trainer_config import TrainerConfig


T = TypeVar("T", bound="RMDistillConfig")


@_attrs_define
class RMDistillConfig:
    """Distil a teacher reward model's pairwise preferences into a (LoRA) student.

    Attributes:
        data (DataConfig | Unset): Batching and lengths (VERL: `data`).
        gate_kl (float | Unset): Held-out mean KL the student must stay below, else the job fails with `distill_gate`.
            Default: 0.05.
        guardrails (StepGuardrailConfig | Unset): The step watchdog of SFT, reward-model training and distillation (PPO:
            `GuardrailConfig`).
        loss (RMDistillConfigLoss | Unset): `kl`: KL(Bern(sigmoid(t_c - t_r)) || Bern(sigmoid(s_c - s_r))); `mse`: on
            standardised score gaps. Default: RMDistillConfigLoss.KL.
        max_token_len_per_gpu (int | Unset):  Default: 3072.
        micro_batch_size_per_gpu (int | Unset): Rows per forward pass; at most `data.train_batch_size`. Default: 2.
        model (DistillModelConfig | Unset): `ModelConfig` for reward-model distillation: LoRA by default, rank picked by
            size.
        optim (DistillOptimConfig | Unset): `OptimConfig` for reward-model distillation (LoRA tolerates a larger
            learning rate).
        trainer (TrainerConfig | Unset): Loop length and cadence (VERL: `trainer`).
        use_dynamic_bsz (bool | Unset):  Default: True.
    """

    data: DataConfig | Unset = UNSET
    gate_kl: float | Unset = 0.05
    guardrails: StepGuardrailConfig | Unset = UNSET
    loss: RMDistillConfigLoss | Unset = RMDistillConfigLoss.KL
    max_token_len_per_gpu: int | Unset = 3072
    micro_batch_size_per_gpu: int | Unset = 2
    model: DistillModelConfig | Unset = UNSET
    optim: DistillOptimConfig | Unset = UNSET
    trainer: TrainerConfig | Unset = UNSET
    use_dynamic_bsz: bool | Unset = True

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] | Unset = UNSET
        if not isinstance(self.data, Unset):
            data = self.data.to_dict()

        gate_kl = self.gate_kl

        guardrails: dict[str, Any] | Unset = UNSET
        if not isinstance(self.guardrails, Unset):
            guardrails = self.guardrails.to_dict()

        loss: str | Unset = UNSET
        if not isinstance(self.loss, Unset):
            loss = self.loss.value

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

        use_dynamic_bsz = self.use_dynamic_bsz

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if data is not UNSET:
            field_dict["data"] = data
        if gate_kl is not UNSET:
            field_dict["gate_kl"] = gate_kl
        if guardrails is not UNSET:
            field_dict["guardrails"] = guardrails
        if loss is not UNSET:
            field_dict["loss"] = loss
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
        if use_dynamic_bsz is not UNSET:
            field_dict["use_dynamic_bsz"] = use_dynamic_bsz

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.data_config import DataConfig  # noqa: PLC0415
        from ..models.distill_model_config import DistillModelConfig  # noqa: PLC0415
        from ..models.distill_optim_config import DistillOptimConfig  # noqa: PLC0415
        from ..models.step_guardrail_config import StepGuardrailConfig  # noqa: PLC0415
        from ..models.trainer_config import TrainerConfig  # noqa: PLC0415

        d = dict(src_dict)
        _data = d.pop("data", UNSET)
        data: DataConfig | Unset
        if isinstance(_data, Unset):
            data = UNSET
        else:
            data = DataConfig.from_dict(_data)

        gate_kl = d.pop("gate_kl", UNSET)

        _guardrails = d.pop("guardrails", UNSET)
        guardrails: StepGuardrailConfig | Unset
        if isinstance(_guardrails, Unset):
            guardrails = UNSET
        else:
            guardrails = StepGuardrailConfig.from_dict(_guardrails)

        _loss = d.pop("loss", UNSET)
        loss: RMDistillConfigLoss | Unset
        if isinstance(_loss, Unset):
            loss = UNSET
        else:
            loss = RMDistillConfigLoss(_loss)

        max_token_len_per_gpu = d.pop("max_token_len_per_gpu", UNSET)

        micro_batch_size_per_gpu = d.pop("micro_batch_size_per_gpu", UNSET)

        _model = d.pop("model", UNSET)
        model: DistillModelConfig | Unset
        if isinstance(_model, Unset):
            model = UNSET
        else:
            model = DistillModelConfig.from_dict(_model)

        _optim = d.pop("optim", UNSET)
        optim: DistillOptimConfig | Unset
        if isinstance(_optim, Unset):
            optim = UNSET
        else:
            optim = DistillOptimConfig.from_dict(_optim)

        _trainer = d.pop("trainer", UNSET)
        trainer: TrainerConfig | Unset
        if isinstance(_trainer, Unset):
            trainer = UNSET
        else:
            trainer = TrainerConfig.from_dict(_trainer)

        use_dynamic_bsz = d.pop("use_dynamic_bsz", UNSET)

        rm_distill_config = cls(
            data=data,
            gate_kl=gate_kl,
            guardrails=guardrails,
            loss=loss,
            max_token_len_per_gpu=max_token_len_per_gpu,
            micro_batch_size_per_gpu=micro_batch_size_per_gpu,
            model=model,
            optim=optim,
            trainer=trainer,
            use_dynamic_bsz=use_dynamic_bsz,
        )

        return rm_distill_config
