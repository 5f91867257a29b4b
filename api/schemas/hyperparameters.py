"""Per-method hyperparameters: pydantic mirrors of engine/config.py (the API must not import the engine).

Field names, nesting and defaults are the engine dataclasses' (VERL's names); tests/api/
test_hyperparameters.py keeps the two in lock-step. On top of the engine's own checks, these schemas
refuse unknown keys, wrong types (strict: `"4"` is not an int, `1` is not a bool), NaN/Inf and
absurd sizes, and report cross-field contradictions at the field that must change, so a problem's
`param` reads `method.hyperparameters.actor.ppo_mini_batch_size`.

VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`) are mapped onto the nested form
by `apply_overrides` before validation.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import pydantic.types
import yaml
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ValidationError,
    WrapValidator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from api.schemas.text import NulFree

MAX_SIZE = 10**6
"""Upper bound for batch sizes, sequence lengths and token budgets: anything larger is a typo."""
MAX_STEPS = 10**8
MAX_SECONDS = 365 * 86400.0
"""Upper bound for durations: a year."""

Dtype = Literal["float32", "bfloat16", "float16"]
Truncation = Literal["error", "left", "right", "middle"]
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLType = Literal["kl", "abs", "mse", "low_var_kl"]

Size = Annotated[int, Field(gt=0, le=MAX_SIZE)]
"""A batch size, sequence length or token budget."""
Epochs = Annotated[int, Field(gt=0, le=10_000)]
Ratio = Annotated[float, Field(gt=0.0, lt=1.0)]
Share = Annotated[float, Field(ge=0.0, le=1.0)]
Coef = Annotated[float, Field(ge=0.0, le=1e6)]
LAX = pydantic.types.Strict(False)
"""JSON has no tuples: a list is fine where the engine keeps a tuple."""


def _one_error(message: str) -> WrapValidator:
    """Collapse a union's per-arm errors into one error at the field itself (a clean `param`)."""
    def wrap(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("invalid_value", message) from None
    return WrapValidator(wrap)


def _freq(value: int) -> int:
    if value != -1 and not 1 <= value <= MAX_STEPS:
        raise PydanticCustomError("invalid_value", "must be -1 (only at the end) or a positive number of steps")
    return value


def _lora_rank(value: int | str) -> int | str:
    if value != "auto" and not 0 <= value <= 1024:
        raise PydanticCustomError("invalid_value", "must be an integer in [0, 1024] or 'auto'")
    return value


LoraRank = Annotated[int | Literal["auto"], _one_error("must be an integer in [0, 1024] or 'auto'"),
                     AfterValidator(_lora_rank)]
CpusPerWorker = Annotated[Annotated[float, Field(gt=0.0, le=1024.0)] | Literal["auto"],
                          _one_error("must be a number in (0, 1024] or 'auto'")]
ModuleName = Annotated[str, Field(min_length=1, max_length=200)]
TargetModules = Annotated[ModuleName | Annotated[tuple[ModuleName, ...], LAX, Field(max_length=1024)],
                          _one_error("must be a module name, 'all-linear' or a list of up to 1024 names")]
Freq = Annotated[int, AfterValidator(_freq)]


class Strict(NulFree):
    """Base of every request schema: unknown keys, type coercion, non-finite floats and NUL are refused."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, use_attribute_docstrings=True)


def errors_at(title: str, *problems: tuple[tuple[str | int, ...], Any, str]) -> ValidationError:
    """A ValidationError located at `loc` (relative to the model that raises it)."""
    return ValidationError.from_exception_data(title, [
        InitErrorDetails(type=PydanticCustomError("value_error", message), loc=loc, input=value)
        for loc, value, message in problems])


Strategy = Literal["ddp", "fsdp2"]
SequenceParallel = Annotated[int, Field(ge=1, le=64)]


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


def _sp_needs_packing(config: Any, problems: list, at: tuple[str, ...] = ()) -> None:
    """Ulysses shards packed rows only (VERL's rule too); `at`: the role holding the knob."""
    sp = (getattr(config, at[0]) if at else config).ulysses_sequence_parallel_size
    if sp > 1 and not config.model.use_remove_padding:
        problems.append(((*at, "ulysses_sequence_parallel_size"), sp,
                         f"{'.'.join((*at, 'ulysses_sequence_parallel_size'))} > 1 needs model.use_remove_padding"))


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


class ActorConfig(Strict):
    """PPO actor update (VERL: `actor_rollout_ref.actor`)."""

    ppo_mini_batch_size: Size = 64
    """Prompts per optimizer step (times `rollout.n` samples); at most `data.train_batch_size`."""
    ppo_micro_batch_size_per_gpu: Size = 2
    """Samples per forward pass; at most `ppo_mini_batch_size * rollout.n`."""
    ppo_epochs: Epochs = 4
    clip_ratio: Ratio = 0.2
    clip_ratio_low: Ratio | None = None
    """Defaults to `clip_ratio`."""
    clip_ratio_high: Ratio | None = None
    """Defaults to `clip_ratio`."""
    clip_ratio_c: Annotated[float, Field(gt=1.0, le=1e6)] = 3.0
    """Dual-clip bound for negative advantages (Ye et al. 2020); must be > 1."""
    entropy_coeff: Coef = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: Coef = 0.001
    kl_loss_type: KLType = "low_var_kl"
    loss_agg_mode: LossAggMode = "token-mean"
    use_dynamic_bsz: bool = True
    ppo_max_token_len_per_gpu: Size = 3072
    """Token budget per micro-batch (about 3x the sequence length)."""
    optim: ActorOptimConfig = Field(default_factory=ActorOptimConfig)
    strategy: Strategy = "ddp"
    """`ddp` or `fsdp2` for the actor's data-parallel workers (see `ModelConfig.strategy`)."""
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)
    ulysses_sequence_parallel_size: SequenceParallel = 1
    """Workers that split every packed row's tokens (Ulysses: all-to-all over attention heads); the
    data-parallel size is `resources.num_workers / this`. Needs `model.use_remove_padding`, must divide
    `resources.num_workers` and the model's attention and key/value heads."""

    @model_validator(mode="after")
    def _strategy(self):
        _offload_needs_fsdp2(self)
        return self


class CriticConfig(Strict):
    """PPO value model (VERL: `critic`)."""

    ppo_mini_batch_size: Size | None = None
    """Defaults to the actor's; at most `data.train_batch_size`."""
    ppo_micro_batch_size_per_gpu: Size = 2
    ppo_epochs: Epochs | None = None
    """Defaults to the actor's."""
    cliprange_value: Annotated[float, Field(gt=0.0, le=1e6)] = 0.5
    loss_agg_mode: LossAggMode = "token-mean"
    use_dynamic_bsz: bool = True
    ppo_max_token_len_per_gpu: Size = 3072
    optim: OptimConfig = Field(default_factory=OptimConfig)
    strategy: Strategy = "ddp"
    """`ddp` or `fsdp2` for the critic's data-parallel workers (see `ModelConfig.strategy`)."""
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)
    ulysses_sequence_parallel_size: SequenceParallel = 1
    """Workers that split every packed row's tokens (Ulysses: all-to-all over attention heads); the
    data-parallel size is `resources.num_workers / this`. Needs `model.use_remove_padding`, must divide
    `resources.num_workers` and the model's attention and key/value heads."""

    @model_validator(mode="after")
    def _strategy(self):
        _offload_needs_fsdp2(self)
        return self


class RefConfig(Strict):
    """The reference policy's workers (VERL: `actor_rollout_ref.ref`)."""

    ulysses_sequence_parallel_size: SequenceParallel = 1
    """Workers that split every packed row's tokens (Ulysses: all-to-all over attention heads); the
    data-parallel size is `resources.num_workers / this`. Needs `model.use_remove_padding`, must divide
    `resources.num_workers` and the model's attention and key/value heads."""


class RolloutConfig(Strict):
    """Sampling (VERL: `actor_rollout_ref.rollout`)."""

    name: Literal["hf", "vllm"] = "hf"
    n: Annotated[int, Field(gt=0, le=1024)] = 5
    """Samples per prompt; at least 2 with a group estimator (`grpo`, `rloo`,
    `reinforce_plus_plus_baseline`)."""
    temperature: Annotated[float, Field(ge=0.0, le=100.0)] = 1.0
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    top_k: Annotated[int, Field(ge=-1, le=MAX_SIZE)] = -1
    """-1 disables top-k."""
    do_sample: bool = True
    val_temperature: Annotated[float, Field(ge=0.0, le=100.0)] = 0.0
    """Validation decoding temperature (0 = greedy)."""
    enforce_eager: bool = False
    """vllm: run without CUDA graphs (graphs capture once at start-up and speed decoding up)."""
    free_cache_engine: bool = True
    """vllm: put the engine to sleep after generating (its KV cache freed, its weights moved to CPU)
    so training gets the GPU memory back; woken before the next weight sync or generation."""
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    """vllm: share of the GPU's memory the engine may take for weights and KV cache."""
    tensor_model_parallel_size: Annotated[int, Field(ge=1, le=64)] = 1
    """vllm: GPUs one engine splits the model over (tensor parallelism); must divide
    `resources.gpus_per_worker`. Needs `name: vllm`."""


class KLControlConfig(Strict):
    """KL coefficient control (VERL: `algorithm.kl_ctrl`)."""

    type: Literal["fixed", "adaptive"] = "adaptive"
    kl_coef: Coef = 0.001
    target_kl: Annotated[float, Field(gt=0.0, le=1e6)] = 0.1
    horizon: Annotated[int, Field(gt=0, le=10**9)] = 10000


class FilterGroupsConfig(Strict):
    """DAPO dynamic sampling (Yu et al. 2025, arXiv:2503.14476): drop prompt groups whose samples all
    scored the same (they carry no group-relative signal) and keep generating to fill the batch."""

    enable: bool = False
    """Needs a group estimator: `grpo`, `rloo` or `reinforce_plus_plus_baseline`."""
    metric: Literal["score"] = "score"
    """What must differ within a group: the sequence score (after reward shaping)."""
    max_num_gen_batches: Annotated[int, Field(ge=0, le=1000)] = 10
    """At most this many prompt batches generated per step (0 = no limit); short of a full batch,
    the step trains on the groups it has and warns."""


class RolloutCorrectionConfig(Strict):
    """Correct for the gap between the rollout engine's log-probs and the trainer's on the same
    tokens (VERL: `algorithm.rollout_correction`; Liu, Li et al. 2025, "When Speed Kills
    Stability"): importance weights pi_old / pi_rollout in the policy loss."""

    rollout_is: Literal["token", "sequence"] | None = None
    """Truncated importance sampling (TIS): each token (`token`) or each sequence (`sequence`, the
    product over its tokens) weighted by the ratio, capped at `rollout_is_threshold` (None: off)."""
    rollout_is_threshold: Annotated[float, Field(gt=0.0, le=1e6)] = 2.0
    """Upper cap of the importance weights."""
    rollout_rs: Literal["token", "sequence"] | None = None
    """Masked importance sampling (MIS, rejection): tokens (`token`) or whole sequences (`sequence`)
    whose ratio lies outside [1 / rollout_rs_threshold, rollout_rs_threshold] leave the loss (None: off)."""
    rollout_rs_threshold: Annotated[float, Field(gt=1.0, le=1e6)] = 2.0
    """Rejection bound (> 1)."""


class AlgorithmConfig(Strict):
    """Advantage estimation and KL-in-reward (VERL: `algorithm`)."""

    adv_estimator: Literal["gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
                           "remax"] = "gae"
    """`gae` trains a critic; the others are critic-free: `grpo` (and Dr. GRPO with
    `norm_adv_by_std_in_grpo: false`), `rloo`, `reinforce_plus_plus`, `reinforce_plus_plus_baseline`
    and `remax` (one extra greedy rollout per prompt as the baseline)."""
    gamma: Share = 1.0
    lam: Share = 0.95
    use_kl_in_reward: bool = True
    kl_penalty: KLType = "kl"
    kl_ctrl: KLControlConfig = Field(default_factory=KLControlConfig)
    norm_adv_by_std_in_grpo: bool = True
    filter_groups: FilterGroupsConfig = Field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = Field(default_factory=RolloutCorrectionConfig)


class RewardFilterConfig(Strict):
    """PF-PPO style filtering of unreliable rewards (Zhang et al. 2024, arXiv:2409.06957)."""

    enable: bool = False
    mode: Literal["best_worst", "best_random"] = "best_worst"
    """Within each prompt's group of `rollout.n` samples, train on the best and the worst (or the best
    and a random other) sample; ties are broken at random; a group whose scores all tie is kept whole."""
    replay_buffer_size: Annotated[int, Field(ge=0, le=MAX_SIZE)] = 0
    """Kept high-confidence samples replayed in later steps (0 disables replay; `gae` only: a
    critic-free estimator has no group for a replayed sample)."""


class GuardrailConfig(Strict):
    """The recipe's monitoring points, enforced."""

    warn_kl: Annotated[float, Field(gt=0.0, le=1e6)] = 0.2
    """KL per step above this emits `job.warning`; at most `rollback_kl`."""
    rollback_kl: Annotated[float, Field(gt=0.0, le=1e6)] = 0.3
    """KL per step above this (or a non-finite loss/gradient) restores the last good checkpoint."""
    max_rollbacks: Annotated[int, Field(ge=0, le=1000)] = 3
    """After this many rollbacks the job fails with `diverged`."""
    rollback_lr_factor: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    """Mitigation: multiply the actor LR by this after a rollback."""
    rollback_clip_ratio: Ratio = 0.1
    """Mitigation: tighten `clip_ratio` to this after a rollback."""
    step_timeout_s: Annotated[float, Field(gt=0.0, le=7 * 86400.0)] = 3600.0
    """A step longer than this fails the job with `step_timeout`."""
    reward_filter: RewardFilterConfig = Field(default_factory=RewardFilterConfig)
    min_entropy: Annotated[float, Field(ge=0.0, le=1e6)] | None = None
    """Collapse: `actor/entropy` (mean per-token entropy of the update's samples) below this trips
    `collapse_action` (None: off)."""
    min_distinct_ratio: Share | None = None
    """Collapse: `val/distinct_responses` (distinct responses / validation prompts) below this trips
    `collapse_action` (None: off)."""
    collapse_action: Literal["warn", "rollback"] = "warn"
    """What a collapse does: `warn` reports `collapse` (with decoded samples); `rollback` also
    restores the state before the step, as a KL rollback does."""
    max_logprob_diff: Annotated[float, Field(gt=0.0, le=1e6)] | None = None
    """`rollout/logprob_diff/mean` (mean |rollout engine log-prob - trainer log-prob| per token)
    above this reports `logprob_gap` (None: off)."""

    @model_validator(mode="after")
    def _warn_before_rollback(self):
        if self.warn_kl > self.rollback_kl:
            raise errors_at("GuardrailConfig", (("warn_kl",), self.warn_kl, "warn_kl must not exceed rollback_kl"))
        return self


class OverlongBufferConfig(Strict):
    """DAPO's soft overlong punishment: a response longer than `max_response_length - len` loses
    `(length - (max_response_length - len)) / len * penalty_factor` of its score (at most
    `penalty_factor`, at the full length)."""

    enable: bool = False
    len: Annotated[int, Field(gt=0, le=MAX_SIZE)] = 64
    """Tokens before `data.max_response_length` where the penalty starts; with `enable`, below
    `data.max_response_length`."""
    penalty_factor: Annotated[float, Field(ge=0.0, le=1e6)] = 1.0


class RewardShapingConfig(Strict):
    """What is done to every sequence score before advantages (VERL: `reward_model`)."""

    overlong_buffer: OverlongBufferConfig = Field(default_factory=OverlongBufferConfig)


GROUP_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline")
"""Estimators whose baseline is the other samples of the same prompt."""


class PPOConfig(Strict):
    """PPO with Actor / Critic / Reference / Reward roles (VERL's ppo_trainer config, trimmed)."""

    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    actor: ActorConfig = Field(default_factory=ActorConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    ref: RefConfig = Field(default_factory=RefConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    reward: RewardShapingConfig = Field(default_factory=RewardShapingConfig)
    trainer: PPOTrainerConfig = Field(default_factory=PPOTrainerConfig)
    guardrails: GuardrailConfig = Field(default_factory=GuardrailConfig)

    @model_validator(mode="after")
    def _consistent(self):
        batch = self.data.train_batch_size
        problems = []
        if self.actor.ppo_mini_batch_size > batch:
            problems.append((("actor", "ppo_mini_batch_size"), self.actor.ppo_mini_batch_size,
                             "actor.ppo_mini_batch_size must not exceed data.train_batch_size"))
        if self.critic.ppo_mini_batch_size is not None and self.critic.ppo_mini_batch_size > batch:
            problems.append((("critic", "ppo_mini_batch_size"), self.critic.ppo_mini_batch_size,
                             "critic.ppo_mini_batch_size must not exceed data.train_batch_size"))
        # The micro-batch counts samples; a mini-batch holds ppo_mini_batch_size * rollout.n of them.
        samples = self.actor.ppo_mini_batch_size * self.rollout.n
        if self.actor.ppo_micro_batch_size_per_gpu > samples:
            problems.append((("actor", "ppo_micro_batch_size_per_gpu"), self.actor.ppo_micro_batch_size_per_gpu,
                             ("actor.ppo_micro_batch_size_per_gpu must not exceed "
                              "actor.ppo_mini_batch_size * rollout.n samples")))
        estimator = self.algorithm.adv_estimator
        if estimator in GROUP_ESTIMATORS and self.rollout.n < 2:
            problems.append((("rollout", "n"), self.rollout.n,
                             f"{estimator} needs rollout.n >= 2 (advantages are relative within a group)"))
        if estimator != "gae" and self.guardrails.reward_filter.replay_buffer_size:
            problems.append((("guardrails", "reward_filter", "replay_buffer_size"),
                             self.guardrails.reward_filter.replay_buffer_size,
                             f"replay needs adv_estimator gae: a replayed sample has no group under {estimator}"))
        if self.algorithm.filter_groups.enable and estimator not in GROUP_ESTIMATORS:
            problems.append((("algorithm", "filter_groups", "enable"), True,
                             "filter_groups needs a group estimator: grpo, rloo or reinforce_plus_plus_baseline"))
        buffer = self.reward.overlong_buffer
        if buffer.enable and buffer.len >= self.data.max_response_length:
            problems.append((("reward", "overlong_buffer", "len"), buffer.len,
                             "reward.overlong_buffer.len must be below data.max_response_length"))
        if self.model.strategy != "ddp":
            problems.append((("model", "strategy"), self.model.strategy,
                             "PPO sets the strategy per role: use actor.strategy and critic.strategy"))
        for role in ("actor", "critic"):
            if (self.model.lora_rank or self.model.lora_adapter_path) and getattr(self, role).strategy == "fsdp2":
                problems.append(((role, "strategy"), "fsdp2",
                                 (f"{role}.strategy fsdp2 does not support LoRA: set model.lora_rank to 0 "
                                  "or use strategy ddp")))
        for role in ("actor", "critic", "ref"):
            _sp_needs_packing(self, problems, (role,))
        if self.rollout.tensor_model_parallel_size > 1 and self.rollout.name != "vllm":
            problems.append((("rollout", "tensor_model_parallel_size"), self.rollout.tensor_model_parallel_size,
                             "rollout.tensor_model_parallel_size > 1 needs rollout.name vllm"))
        if problems:
            raise errors_at("PPOConfig", *problems)
        return self


class EvalDataConfig(Strict):
    """What an evaluation reads, and how long its generations may be (VERL `data` names)."""

    val_batch_size: Size = 64
    """Prompts generated per batch (each `rollout.n` times), split over the workers."""
    max_prompt_length: Size = 1024
    max_response_length: Size = 2048
    truncation: Truncation = "error"
    filter_overlong_prompts: bool = False
    """Drop prompts longer than `max_prompt_length` (before any truncation)."""


class EvalModelConfig(Strict):
    """How the evaluated models are held: frozen, in `dtype`."""

    dtype: Dtype = "float32"
    """Compute dtype of every model of the job (the policy, `compare_to`, a reward model)."""


class EvalRolloutConfig(Strict):
    """Sampling (VERL `actor_rollout_ref.rollout` names), with the `hf` backend."""

    n: Annotated[int, Field(gt=0, le=1024)] = 1
    """Samples per prompt; pass@k is reported for k = 1, 2, 4, ... up to n."""
    temperature: Annotated[float, Field(ge=0.0, le=100.0)] = 0.0
    """0 = greedy."""
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    top_k: Annotated[int, Field(ge=-1, le=MAX_SIZE)] = -1
    """-1 disables top-k."""


class EvalConfig(Strict):
    """Evaluation: sample responses to prompts and score them (no training, no output model)."""

    data: EvalDataConfig = Field(default_factory=EvalDataConfig)
    model: EvalModelConfig = Field(default_factory=EvalModelConfig)
    rollout: EvalRolloutConfig = Field(default_factory=EvalRolloutConfig)
    pass_threshold: Annotated[float, Field(ge=-1e6, le=1e6)] = 1.0
    """Rule rewards: a sample passes (for pass@k) when its score is at least this."""


METHOD_HYPERPARAMETERS: dict[str, type[Strict]] = {
    "sft": SFTConfig,
    "reward_model": RewardModelConfig,
    "rm_distill": RMDistillConfig,
    "dpo": DPOConfig,
    "ppo": PPOConfig,
    "eval": EvalConfig,
}


class Resources(Strict):
    """Where a job runs: data-parallel workers and what each gets."""

    num_workers: Annotated[int, Field(gt=0, le=1024)] = 1
    """Data-parallel workers; 1 with `executor: local`."""
    cpus_per_worker: CpusPerWorker = "auto"
    """CPUs reserved for each worker; its torch threads follow them. `auto` is resolved when the job is
    created and the job holds the number: for a CPU-only job the most whole CPUs per worker, up to the
    deployment's `KEEL_AUTO_CPUS_PER_WORKER_MAX` (16), with which the job fits the whole cluster (and
    `KEEL_MAX_JOB_CPUS`); 1 for a job with GPUs, or while no worker has published the cluster's capacity."""
    gpus_per_worker: Annotated[float, Field(ge=0.0, le=64.0)] = 0.0
    colocate: bool = True
    """PPO: put all roles on one set of resources (else one placement group bundle per role)."""
    placement: Literal["pack", "spread", "strict_spread"] = "pack"
    """How the workers' bundles go onto nodes: `pack` (as few nodes as fit), `spread` (as many as
    possible), `strict_spread` (one node per bundle, or wait). Ray's PACK / SPREAD / STRICT_SPREAD."""
    executor: Literal["local", "ray"] = "ray"
    """`ray`: workers are Ray actors (the controller, PPO's roles, data-parallel replicas). `local`:
    the job runs in the worker's own process on its one device, without Ray (one worker only)."""

    @model_validator(mode="after")
    def _local_is_one_worker(self):
        if self.executor == "local" and self.num_workers != 1:
            raise errors_at("Resources", (("num_workers",), self.num_workers,
                                          "resources.executor 'local' runs one worker: num_workers must be 1"))
        return self


class JobResources(Resources):
    """`Resources` as a job holds them: `cpus_per_worker` is the number `auto` resolved to at creation."""

    cpus_per_worker: Annotated[float, Field(gt=0.0, le=1024.0)] = 1.0
    """CPUs reserved for each worker (its torch threads follow them)."""


# -- VERL-style dotted overrides ----------------------------------------------------------------

MAX_OVERRIDES = 200
_KEY = re.compile(r"\+?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_VERL_PREFIX = "actor_rollout_ref."
"""VERL nests actor, rollout, ref and model under `actor_rollout_ref`; Keel puts them at the top."""


def parse_value(text: str) -> Any:
    """A JSON value (`1e-4`, `true`, `[0.9, 0.95]`), else a YAML scalar (`True`, `null`, `~`), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, bool | int | float | list | dict) or value is None else text


def map_key(key: str) -> list[str]:
    """`actor_rollout_ref.actor.ppo_epochs` -> `["actor", "ppo_epochs"]` (Keel's nesting)."""
    key = key.removeprefix("+")
    key = key.removeprefix(_VERL_PREFIX)
    return key.split(".")


def apply_overrides(hyperparameters: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Merge `key=value` overrides into a copy of the nested hyperparameters (later ones win).

    Raises a ValidationError located at `("overrides", i)` for an override that is not `key=value`
    or that sets a key below a non-object value; everything else is left to schema validation, so an
    unknown or mistyped key is reported at its nested path (`hyperparameters.actor.ppo_epochs`)."""
    merged = json.loads(json.dumps(hyperparameters))  # a deep copy of plain JSON
    for i, item in enumerate(overrides):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            raise errors_at("overrides", (("overrides", i), item,
                                        "an override must look like `section.key=value` (VERL dotted name)"))
        *parents, leaf = map_key(key)
        node = merged
        for depth, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise errors_at("overrides", (("overrides", i), item,
                                            f"{'.'.join(parents[:depth + 1])} is not an object"))
        node[leaf] = parse_value(raw.strip())
    return merged
