"""The supervised methods' hyperparameters: SFT, reward-model training, reward-model distillation and DPO,
over the fields they share (data, model, optim, trainer, micro-batching, the step watchdog)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from api.schemas.hyperparameters.fields import Coef, SequenceParallel, Size, Strict, errors_at
from api.schemas.hyperparameters.sections import (
    DataConfig,
    DistillModelConfig,
    DistillOptimConfig,
    DPOOptimConfig,
    ModelConfig,
    OptimConfig,
    StepGuardrailConfig,
    TrainerConfig,
    _sp_needs_packing,
)


class _Supervised(Strict):
    """Fields shared by SFT, reward-model training and distillation."""

    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    micro_batch_size_per_gpu: Size = 2
    """Rows per forward pass; at most `data.train_batch_size`."""
    use_dynamic_bsz: bool = True
    max_token_len_per_gpu: Size = 3072
    guardrails: StepGuardrailConfig = Field(default_factory=StepGuardrailConfig)

    @model_validator(mode="after")
    def _micro_within_batch(self):
        if self.micro_batch_size_per_gpu > self.data.train_batch_size:
            raise errors_at(type(self).__name__, (("micro_batch_size_per_gpu",), self.micro_batch_size_per_gpu,
                                                "micro_batch_size_per_gpu must not exceed data.train_batch_size"))
        return self


class _SequenceParallel(_Supervised):
    ulysses_sequence_parallel_size: SequenceParallel = 1
    """Workers that split every packed row's tokens (Ulysses: all-to-all over attention heads); the
    data-parallel size is `resources.num_workers / this`. Needs `model.use_remove_padding`, must divide
    `resources.num_workers` and the model's attention and key/value heads."""

    @model_validator(mode="after")
    def _sp_packed(self):
        problems: list = []
        _sp_needs_packing(self, problems)
        if problems:
            raise errors_at(type(self).__name__, *problems)
        return self


class SFTConfig(_SequenceParallel):
    """Supervised fine-tuning: causal-LM loss on response tokens only."""


class RewardModelConfig(_SequenceParallel):
    """Bradley-Terry reward model: -log sigmoid(r_chosen - r_rejected - margin)."""

    center_rewards_coefficient: Coef = 0.0
    """Weight of the mean((r_c + r_r)^2) term that keeps scores centred on 0 (Eisenstein et al.)."""


class RMDistillConfig(_Supervised):
    """Distil a teacher reward model's pairwise preferences into a (LoRA) student."""

    model: DistillModelConfig = Field(default_factory=DistillModelConfig)
    optim: DistillOptimConfig = Field(default_factory=DistillOptimConfig)
    loss: Literal["kl", "mse"] = "kl"
    """`kl`: KL(Bern(sigmoid(t_c - t_r)) || Bern(sigmoid(s_c - s_r))); `mse`: on standardised score gaps."""
    gate_kl: Annotated[float, Field(gt=0.0, le=1e6)] = 0.05
    """Held-out mean KL the student must stay below, else the job fails with `distill_gate`."""


class DPOConfig(_Supervised):
    """Offline preference optimisation of a policy on preference pairs (TRL's names): DPO, cDPO, IPO.

    The reference is the model at `model` (with LoRA: the same base, adapter off); its log-probs are
    computed once before training and cached beside the checkpoints."""

    optim: DPOOptimConfig = Field(default_factory=DPOOptimConfig)
    beta: Annotated[float, Field(gt=0.0, le=1e6)] = 0.1
    """KL coefficient: how far the policy may move from the reference (larger: nearer)."""
    loss_type: Literal["sigmoid", "ipo"] = "sigmoid"
    """`sigmoid`: DPO (Rafailov et al. 2023) on response log-prob sums; `ipo`: IPO (Azar et al.
    2023), ((log-ratio chosen - log-ratio rejected) - 1/(2 beta))^2 on per-token mean log-probs."""
    label_smoothing: Annotated[float, Field(ge=0.0, lt=0.5)] = 0.0
    """Conservative DPO (`sigmoid` only): the assumed probability that a pair's label is flipped, in [0, 0.5)."""

    @model_validator(mode="after")
    def _smoothing_needs_sigmoid(self):
        if self.label_smoothing and self.loss_type != "sigmoid":
            raise errors_at("DPOConfig", (("label_smoothing",), self.label_smoothing,
                                          "label_smoothing applies to loss_type sigmoid only"))
        return self
