"""The config sections every training method shares (VERL's names): how the model is loaded
(`ModelConfig`, `FSDPConfig`), the optimizer (`OptimConfig`), loop length and cadence
(`TrainerConfig`), batching and lengths (`DataConfig`), and the supervised methods' step watchdog
(`StepGuardrailConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Dtype = Literal["float32", "bfloat16", "float16"]
Truncation = Literal["error", "left", "right", "middle"]
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


Strategy = Literal["ddp", "fsdp2"]


@dataclass(frozen=True)
class FSDPConfig:
    """FSDP2 options (VERL: `fsdp_config`); they apply with `strategy: fsdp2` only."""

    param_offload: bool = False
    """Keep the sharded parameters and gradients in host memory (FSDP2 `CPUOffloadPolicy`); the
    optimizer step then runs on the CPU."""
    optimizer_offload: bool = False
    """Keep the optimizer state in host memory between steps (moved to the device for the step)."""


@dataclass(frozen=True)
class ModelConfig:
    """How the trained model is loaded (VERL: `actor_rollout_ref.model`)."""

    dtype: Dtype = "float32"
    """Compute dtype (autocast). Trained weights and optimizer state stay float32 (master copy);
    frozen models (reference, reward, teacher) and a LoRA base are held in this dtype. `float16`
    adds loss scaling; on CPU prefer `bfloat16` (float16 kernels are slow there)."""
    enable_gradient_checkpointing: bool = False
    """Recompute activations in backward: less memory, about 30% more compute."""
    use_remove_padding: bool = True
    """Pack each micro-batch into one row without padding (positions restart per sequence, attention
    stays inside each sequence; the token budget counts real tokens). Models whose attention does
    not go through transformers' attention interface keep padding."""
    lora_rank: int | Literal["auto"] = 0
    """0 = full fine-tuning; `auto` picks by parameter count (<1B: 32, <10B: 64, else 128)."""
    lora_alpha: int = 16
    """LoRA scaling numerator (scale = alpha / rank)."""
    target_modules: str | tuple[str, ...] = "all-linear"
    """Modules that get adapters; `all-linear` as in the recipe."""
    lora_adapter_path: str | None = None
    """Continue from an existing adapter directory (`adapter_model.safetensors`)."""
    strategy: Strategy = "ddp"
    """Data parallelism of SFT / reward-model / distillation workers: `ddp` (full replicas,
    gradients all-reduced) or `fsdp2` (parameters, gradients and optimizer state sharded). PPO sets
    it per role: `actor.strategy`, `critic.strategy`."""
    fsdp_config: FSDPConfig = FSDPConfig()


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with warm-up and a schedule (VERL: `optim`)."""

    lr: float = 1e-5
    """Peak learning rate."""
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    lr_warmup_steps_ratio: float = 0.0
    """Share of total steps spent warming up linearly from 0."""
    lr_scheduler_type: Literal["constant", "cosine", "linear"] = "constant"
    min_lr_ratio: float = 0.0
    """Floor of the cosine/linear decay as a share of `lr`."""
    grad_clip: float = 1.0
    """Max global gradient norm (0 disables clipping)."""


@dataclass(frozen=True)
class TrainerConfig:
    """Loop length and cadence (VERL: `trainer`)."""

    total_epochs: int = 1
    total_training_steps: int | None = None
    """Overrides `total_epochs` when set."""
    save_freq: int = -1
    """Checkpoint every N steps (-1: only at the end)."""
    test_freq: int = -1
    """Validate every N steps (-1: only at the end)."""
    val_before_train: bool = True
    """PPO: validate once before the first step (logged at step 0), the baseline every later
    validation is read against (with validation data; a resumed run does not repeat it)."""
    critic_warmup: int = 0
    """PPO only: steps that train the critic before the actor starts updating."""
    max_duration_s: float | None = None
    """Wall-clock budget of the whole run, earlier attempts included: past it the job saves a
    checkpoint at the next step boundary and fails with `max_duration_exceeded` (None: no limit)."""
    max_actor_ckpt_to_keep: int | None = None
    """Keep only the newest N checkpoints (supervised methods: the model's); older ones are deleted
    as new ones are recorded (None: keep all). Enforced by the service (`core.checkpoints.prune`)."""
    max_critic_ckpt_to_keep: int | None = None
    """PPO: keep the critic part of only the newest N checkpoints (None: keep all)."""


@dataclass(frozen=True)
class DataConfig:
    """Batching and lengths (VERL: `data`)."""

    train_batch_size: int = 64
    """Rows (pairs, prompts, examples) per optimizer step (PPO: prompts per iteration)."""
    val_batch_size: int | None = None
    max_prompt_length: int = 1024
    max_response_length: int = 2048
    max_length: int | None = None
    """SFT / reward model: cap on prompt+response tokens (defaults to the sum of the two above)."""
    truncation: Truncation = "error"
    """Too-long rows: `error` fails the job at the first; else the prompt is cut (`left` keeps its
    end, `right` its start, `middle` both ends) and a response always loses its end."""
    filter_overlong_prompts: bool = False
    """Drop rows whose prompt is longer than `max_prompt_length` (before any truncation)."""
    shuffle: bool = True

    @property
    def max_total_length(self) -> int:
        return self.max_length or (self.max_prompt_length + self.max_response_length)


@dataclass(frozen=True)
class StepGuardrailConfig:
    """The step watchdog of SFT, reward-model training and distillation (PPO: `GuardrailConfig`)."""

    step_timeout_s: float = 3600.0
    """A step longer than this fails the job with `step_timeout`."""
