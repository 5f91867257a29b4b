"""The sections several methods share (VERL names): model loading, FSDP2, optimizer, loop cadence, data
batching and lengths, the step watchdog; with the context-specific defaults some methods use."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from api.schemas.hyperparameters.fields import (
    LAX,
    MAX_SECONDS,
    MAX_STEPS,
    Coef,
    Dtype,
    Epochs,
    Freq,
    LoraRank,
    Share,
    Size,
    Strategy,
    Strict,
    TargetModules,
    Truncation,
    errors_at,
)


class FSDPConfig(Strict):
    """FSDP2 options (VERL: `fsdp_config`); they apply with `strategy: fsdp2` only."""

    param_offload: bool = False
    """Keep the sharded parameters and gradients in host memory (FSDP2 `CPUOffloadPolicy`); the
    optimizer step then runs on the CPU. Needs `strategy: fsdp2`."""
    optimizer_offload: bool = False
    """Keep the optimizer state in host memory between steps (moved to the device for the step).
    Needs `strategy: fsdp2`."""


def _offload_needs_fsdp2(config: Any) -> None:
    """Offload knobs under `ddp` would do nothing: refuse them (as the engine does)."""
    if config.strategy == "ddp":
        for name in ("param_offload", "optimizer_offload"):
            if getattr(config.fsdp_config, name):
                raise errors_at(type(config).__name__, (("fsdp_config", name), True,
                                                        f"fsdp_config.{name} needs strategy fsdp2"))


class ModelConfig(Strict):
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
    lora_rank: LoraRank = 0
    """0 = full fine-tuning; `auto` picks by parameter count (<1B: 32, <10B: 64, else 128)."""
    lora_alpha: Annotated[int, Field(gt=0, le=100_000)] = 16
    """LoRA scaling numerator (scale = alpha / rank)."""
    target_modules: TargetModules = "all-linear"
    """Modules that get adapters; `all-linear` as in the recipe."""
    lora_adapter_path: Annotated[str, Field(min_length=1, max_length=1000)] | None = None
    """Continue from an existing adapter directory (`adapter_model.safetensors`) under a model root."""
    strategy: Strategy = "ddp"
    """Data parallelism of SFT / reward-model / distillation workers: `ddp` (full replicas,
    gradients all-reduced) or `fsdp2` (parameters, gradients and optimizer state sharded; not with
    LoRA: `lora_rank` 0, no `lora_adapter_path`). PPO sets it per role (`actor.strategy`,
    `critic.strategy`) and needs `ddp` here."""
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)

    @model_validator(mode="after")
    def _strategy(self):
        _offload_needs_fsdp2(self)
        if self.strategy == "fsdp2" and (self.lora_rank or self.lora_adapter_path):
            raise errors_at(type(self).__name__, (("strategy",), self.strategy,
                                                  ("strategy fsdp2 does not support LoRA: set lora_rank to 0 "
                                                   "or use strategy ddp")))
        return self


class DistillModelConfig(ModelConfig):
    """`ModelConfig` for reward-model distillation: LoRA by default, rank picked by size."""

    lora_rank: LoraRank = "auto"
    """0 = full fine-tuning; `auto` picks by parameter count (<1B: 32, <10B: 64, else 128)."""


class OptimConfig(Strict):
    """AdamW with warm-up and a schedule (VERL: `optim`)."""

    lr: Annotated[float, Field(gt=0.0, le=1.0)] = 1e-5
    """Peak learning rate."""
    weight_decay: Annotated[float, Field(ge=0.0, le=10.0)] = 0.0
    betas: Annotated[tuple[Annotated[float, Field(ge=0.0, lt=1.0)], Annotated[float, Field(ge=0.0, lt=1.0)]],
                     LAX] = (0.9, 0.999)
    lr_warmup_steps_ratio: Share = 0.0
    """Share of total steps spent warming up linearly from 0."""
    lr_scheduler_type: Literal["constant", "cosine", "linear"] = "constant"
    min_lr_ratio: Share = 0.0
    """Floor of the cosine/linear decay as a share of `lr`."""
    grad_clip: Coef = 1.0
    """Max global gradient norm (0 disables clipping)."""


class ActorOptimConfig(OptimConfig):
    """`OptimConfig` for the PPO actor (a smaller learning rate)."""

    lr: Annotated[float, Field(gt=0.0, le=1.0)] = 1e-6
    """Peak learning rate."""


class DistillOptimConfig(OptimConfig):
    """`OptimConfig` for reward-model distillation (LoRA tolerates a larger learning rate)."""

    lr: Annotated[float, Field(gt=0.0, le=1.0)] = 1e-4
    """Peak learning rate."""


class DPOOptimConfig(OptimConfig):
    """`OptimConfig` for DPO (a policy learning rate, as TRL's default)."""

    lr: Annotated[float, Field(gt=0.0, le=1.0)] = 1e-6
    """Peak learning rate."""


class TrainerConfig(Strict):
    """Loop length and cadence (VERL: `trainer`)."""

    total_epochs: Epochs = 1
    total_training_steps: Annotated[int, Field(gt=0, le=MAX_STEPS)] | None = None
    """Overrides `total_epochs` when set."""
    save_freq: Freq = -1
    """Checkpoint every N steps (-1: only at the end)."""
    test_freq: Freq = -1
    """Validate every N steps (-1: only at the end)."""
    val_before_train: bool = True
    """PPO: validate once before the first step (logged at step 0), the baseline every later
    validation is read against (with validation data; a resumed run does not repeat it)."""
    critic_warmup: Annotated[int, Field(ge=0, le=MAX_STEPS)] = 0
    """PPO only: steps that train the critic before the actor starts updating."""
    max_duration_s: Annotated[float, Field(gt=0.0, le=MAX_SECONDS)] | None = None
    """Wall-clock budget of the whole run, earlier attempts included: past it the job saves a
    checkpoint at the next step boundary and fails with `max_duration_exceeded` (None: no limit)."""
    max_actor_ckpt_to_keep: Annotated[int, Field(ge=1, le=MAX_STEPS)] | None = None
    """Keep only the newest N checkpoints (supervised methods: the model's); older ones are deleted,
    files and all, as new ones are recorded, except those a queued or running job uses (None: keep all)."""
    max_critic_ckpt_to_keep: Annotated[int, Field(ge=1, le=MAX_STEPS)] | None = None
    """PPO: keep the critic part of only the newest N checkpoints (None: keep all)."""


class PPOTrainerConfig(TrainerConfig):
    """`TrainerConfig` for PPO (3 epochs by default, as in the recipe)."""

    total_epochs: Epochs = 3


class DataConfig(Strict):
    """Batching and lengths (VERL: `data`)."""

    train_batch_size: Size = 64
    """Rows (pairs, prompts, examples) per optimizer step (PPO: prompts per iteration)."""
    val_batch_size: Size | None = None
    max_prompt_length: Size = 1024
    """Left out, with a model whose config.json names its context window: half the window, at most 1024."""
    max_response_length: Size = 2048
    """Left out, with a known context window: the rest of the window, at most 2048. Prompt + response
    (or `max_length`) must fit the window."""
    max_length: Size | None = None
    """SFT / reward model: cap on prompt+response tokens (defaults to the sum of the two above; reward
    model, distillation and DPO with a known context window: the window, at most 3072)."""
    truncation: Truncation = "error"
    """Too-long rows: `error` fails the job at the first; else the prompt is cut (`left` keeps its
    end, `right` its start, `middle` both ends) and a response always loses its end."""
    filter_overlong_prompts: bool = False
    """Drop rows whose prompt is longer than `max_prompt_length` (before any truncation)."""
    shuffle: bool = True


class StepGuardrailConfig(Strict):
    """The step watchdog of SFT, reward-model training and distillation (PPO: `GuardrailConfig`)."""

    step_timeout_s: Annotated[float, Field(gt=0.0, le=7 * 86400.0)] = 3600.0
    """A step longer than this fails the job with `step_timeout`."""


def _sp_needs_packing(config: Any, problems: list, at: tuple[str, ...] = ()) -> None:
    """Ulysses shards packed rows only (VERL's rule too); `at`: the role holding the knob."""
    sp = (getattr(config, at[0]) if at else config).ulysses_sequence_parallel_size
    if sp > 1 and not config.model.use_remove_padding:
        problems.append(((*at, "ulysses_sequence_parallel_size"), sp,
                         f"{'.'.join((*at, 'ulysses_sequence_parallel_size'))} > 1 needs model.use_remove_padding"))
