"""The configs of the supervised methods: SFT, Bradley-Terry reward models, reward-model distillation
and DPO (offline preference optimisation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.config.sections import DataConfig, ModelConfig, OptimConfig, StepGuardrailConfig, TrainerConfig


@dataclass(frozen=True)
class SFTConfig:
    """Supervised fine-tuning: causal-LM loss on response tokens only."""

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    optim: OptimConfig = OptimConfig(lr=1e-5)
    trainer: TrainerConfig = TrainerConfig()
    micro_batch_size_per_gpu: int = 2
    use_dynamic_bsz: bool = True
    max_token_len_per_gpu: int = 3072
    guardrails: StepGuardrailConfig = StepGuardrailConfig()
    ulysses_sequence_parallel_size: int = 1
    """Workers that split every packed row's tokens (Ulysses: all-to-all over attention heads); the
    data-parallel size is `num_workers / this`. Needs `model.use_remove_padding`, must divide
    `resources.num_workers` and the model's attention and key/value heads."""


@dataclass(frozen=True)
class RewardModelConfig:
    """Bradley-Terry reward model: -log sigmoid(r_chosen - r_rejected - margin)."""

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    optim: OptimConfig = OptimConfig(lr=1e-5)
    trainer: TrainerConfig = TrainerConfig()
    micro_batch_size_per_gpu: int = 2
    use_dynamic_bsz: bool = True
    max_token_len_per_gpu: int = 3072
    guardrails: StepGuardrailConfig = StepGuardrailConfig()
    ulysses_sequence_parallel_size: int = 1
    """Workers that split every packed row's tokens (Ulysses: all-to-all over attention heads); the
    data-parallel size is `num_workers / this`. Needs `model.use_remove_padding`, must divide
    `resources.num_workers` and the model's attention and key/value heads."""
    center_rewards_coefficient: float = 0.0
    """Weight of the mean((r_c + r_r)^2) term that keeps scores centred on 0 (Eisenstein et al.)."""


@dataclass(frozen=True)
class RMDistillConfig:
    """Distil a teacher reward model's pairwise preferences into a (LoRA) student."""

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig(lora_rank="auto")
    optim: OptimConfig = OptimConfig(lr=1e-4)
    trainer: TrainerConfig = TrainerConfig()
    micro_batch_size_per_gpu: int = 2
    use_dynamic_bsz: bool = True
    max_token_len_per_gpu: int = 3072
    guardrails: StepGuardrailConfig = StepGuardrailConfig()
    loss: Literal["kl", "mse"] = "kl"
    """`kl`: KL(Bern(sigmoid(t_c - t_r)) || Bern(sigmoid(s_c - s_r))); `mse`: on standardised score gaps."""
    gate_kl: float = 0.05
    """Held-out mean KL the student must stay below, else the job fails with `distill_gate`."""


PreferenceLossType = Literal["sigmoid", "ipo"]


@dataclass(frozen=True)
class DPOConfig:
    """Offline preference optimisation of a policy on preference pairs (TRL's names): DPO, cDPO, IPO.

    The reference is the model at `model` (with LoRA: the same base, adapter off); its log-probs are
    computed once before training and cached beside the checkpoints."""

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    optim: OptimConfig = OptimConfig(lr=1e-6)
    trainer: TrainerConfig = TrainerConfig()
    micro_batch_size_per_gpu: int = 2
    use_dynamic_bsz: bool = True
    max_token_len_per_gpu: int = 3072
    guardrails: StepGuardrailConfig = StepGuardrailConfig()
    beta: float = 0.1
    """KL coefficient: how far the policy may move from the reference (larger: nearer)."""
    loss_type: PreferenceLossType = "sigmoid"
    """`sigmoid`: DPO (Rafailov et al. 2023) on response log-prob sums; `ipo`: IPO (Azar et al.
    2023), ((log-ratio chosen - log-ratio rejected) - 1/(2 beta))^2 on per-token mean log-probs."""
    label_smoothing: float = 0.0
    """Conservative DPO (`sigmoid` only): the assumed probability that a pair's label is flipped, in [0, 0.5)."""
