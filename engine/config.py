"""Per-job hyperparameters as frozen dataclasses, named and nested like VERL's config.

Defaults follow Keel's production recipe (../shared/rlhf-defaults.md); tests override sizes for tiny
CPU runs. The API validates requests with its own pydantic schema and hands the validated dict to
`build_config`, which rejects unknown keys with the dotted path of the offender.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.errors import ConfigError

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


@dataclass(frozen=True)
class ActorConfig:
    """PPO actor update (VERL: `actor_rollout_ref.actor`)."""

    ppo_mini_batch_size: int = 64
    """Prompts per optimizer step (times `rollout.n` samples)."""
    ppo_micro_batch_size_per_gpu: int = 2
    ppo_epochs: int = 4
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    """Defaults to `clip_ratio`."""
    clip_ratio_high: float | None = None
    """Defaults to `clip_ratio`."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound for negative advantages (Ye et al. 2020); must be > 1."""
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: Literal["kl", "abs", "mse", "low_var_kl"] = "low_var_kl"
    loss_agg_mode: LossAggMode = "token-mean"
    use_dynamic_bsz: bool = True
    ppo_max_token_len_per_gpu: int = 3072
    """Token budget per micro-batch (about 3x the sequence length)."""
    optim: OptimConfig = OptimConfig(lr=1e-6)
    strategy: Strategy = "ddp"
    """`ddp` or `fsdp2` for the actor's data-parallel workers (see `ModelConfig.strategy`)."""
    fsdp_config: FSDPConfig = FSDPConfig()
    ulysses_sequence_parallel_size: int = 1
    """Workers that split every packed row's tokens (Ulysses: all-to-all over attention heads); the
    data-parallel size is `num_workers / this`. Needs `model.use_remove_padding`, must divide
    `resources.num_workers` and the model's attention and key/value heads."""

    @property
    def clip_low(self) -> float:
        return self.clip_ratio if self.clip_ratio_low is None else self.clip_ratio_low

    @property
    def clip_high(self) -> float:
        return self.clip_ratio if self.clip_ratio_high is None else self.clip_ratio_high


@dataclass(frozen=True)
class CriticConfig:
    """PPO value model (VERL: `critic`)."""

    ppo_mini_batch_size: int | None = None
    """Defaults to the actor's."""
    ppo_micro_batch_size_per_gpu: int = 2
    ppo_epochs: int | None = None
    """Defaults to the actor's."""
    cliprange_value: float = 0.5
    loss_agg_mode: LossAggMode = "token-mean"
    use_dynamic_bsz: bool = True
    ppo_max_token_len_per_gpu: int = 3072
    optim: OptimConfig = OptimConfig(lr=1e-5)
    strategy: Strategy = "ddp"
    """`ddp` or `fsdp2` for the critic's data-parallel workers (see `ModelConfig.strategy`)."""
    fsdp_config: FSDPConfig = FSDPConfig()
    ulysses_sequence_parallel_size: int = 1
    """Workers that split every packed row's tokens (Ulysses: all-to-all over attention heads); the
    data-parallel size is `num_workers / this`. Needs `model.use_remove_padding`, must divide
    `resources.num_workers` and the model's attention and key/value heads."""


@dataclass(frozen=True)
class RefConfig:
    """The reference policy's workers (VERL: `actor_rollout_ref.ref`)."""

    ulysses_sequence_parallel_size: int = 1
    """Workers that split every packed row's tokens (Ulysses: all-to-all over attention heads); the
    data-parallel size is `num_workers / this`. Needs `model.use_remove_padding`, must divide
    `resources.num_workers` and the model's attention and key/value heads."""


@dataclass(frozen=True)
class RolloutConfig:
    """Sampling (VERL: `actor_rollout_ref.rollout`)."""

    name: Literal["hf", "vllm"] = "hf"
    n: int = 5
    """Samples per prompt."""
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    """-1 disables top-k."""
    do_sample: bool = True
    val_temperature: float = 0.0
    """Validation decoding temperature (0 = greedy)."""
    enforce_eager: bool = False
    """vllm: run without CUDA graphs (graphs capture once at start-up and speed decoding up)."""
    free_cache_engine: bool = True
    """vllm: put the engine to sleep after generating (its KV cache freed, its weights moved to CPU)
    so training gets the GPU memory back; woken before the next weight sync or generation."""
    gpu_memory_utilization: float = 0.5
    """vllm: share of the GPU's memory the engine may take for weights and KV cache."""
    tensor_model_parallel_size: int = 1
    """vllm: GPUs one engine splits the model over (tensor parallelism); must divide
    `resources.gpus_per_worker`."""


@dataclass(frozen=True)
class KLControlConfig:
    """KL coefficient control (VERL: `algorithm.kl_ctrl`)."""

    type: Literal["fixed", "adaptive"] = "adaptive"
    kl_coef: float = 0.001
    target_kl: float = 0.1
    horizon: int = 10000


@dataclass(frozen=True)
class FilterGroupsConfig:
    """DAPO dynamic sampling (Yu et al. 2025, arXiv:2503.14476): drop prompt groups whose samples all
    scored the same (they carry no group-relative signal) and keep generating to fill the batch."""

    enable: bool = False
    metric: Literal["score"] = "score"
    """What must differ within a group: the sequence score (after reward shaping)."""
    max_num_gen_batches: int = 10
    """At most this many prompt batches generated per step (0 = no limit); short of a full batch,
    the step trains on the groups it has and warns."""


@dataclass(frozen=True)
class RolloutCorrectionConfig:
    """Correct for the gap between the rollout engine's log-probs and the trainer's on the same
    tokens (VERL: `algorithm.rollout_correction`; Liu, Li et al. 2025, "When Speed Kills
    Stability"): importance weights pi_old / pi_rollout in the policy loss."""

    rollout_is: Literal["token", "sequence"] | None = None
    """Truncated importance sampling (TIS): each token (`token`) or each sequence (`sequence`, the
    product over its tokens) weighted by the ratio, capped at `rollout_is_threshold` (None: off)."""
    rollout_is_threshold: float = 2.0
    """Upper cap of the importance weights."""
    rollout_rs: Literal["token", "sequence"] | None = None
    """Masked importance sampling (MIS, rejection): tokens (`token`) or whole sequences (`sequence`)
    whose ratio lies outside [1 / rollout_rs_threshold, rollout_rs_threshold] leave the loss (None: off)."""
    rollout_rs_threshold: float = 2.0
    """Rejection bound (> 1)."""


AdvEstimator = Literal["gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"]
GROUP_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline")
"""Estimators whose baseline is the other samples of the same prompt."""


@dataclass(frozen=True)
class AlgorithmConfig:
    """Advantage estimation and KL-in-reward (VERL: `algorithm`)."""

    adv_estimator: AdvEstimator = "gae"
    """`gae` trains a critic; the others are critic-free: `grpo` (and Dr. GRPO with
    `norm_adv_by_std_in_grpo: false`), `rloo`, `reinforce_plus_plus`, `reinforce_plus_plus_baseline`
    and `remax` (one extra greedy rollout per prompt as the baseline)."""
    gamma: float = 1.0
    lam: float = 0.95
    use_kl_in_reward: bool = True
    kl_penalty: Literal["kl", "abs", "mse", "low_var_kl"] = "kl"
    kl_ctrl: KLControlConfig = KLControlConfig()
    norm_adv_by_std_in_grpo: bool = True
    filter_groups: FilterGroupsConfig = FilterGroupsConfig()
    rollout_correction: RolloutCorrectionConfig = RolloutCorrectionConfig()


@dataclass(frozen=True)
class RewardFilterConfig:
    """PF-PPO style filtering of unreliable rewards (Zhang et al. 2024, arXiv:2409.06957)."""

    enable: bool = False
    mode: Literal["best_worst", "best_random"] = "best_worst"
    """Within each prompt's group of `rollout.n` samples, train on the best and the worst (or the best
    and a random other) sample; ties are broken at random; a group whose scores all tie is kept whole."""
    replay_buffer_size: int = 0
    """Kept high-confidence samples replayed in later steps (0 disables replay; `gae` only: a
    critic-free estimator has no group for a replayed sample)."""


@dataclass(frozen=True)
class GuardrailConfig:
    """The recipe's monitoring points, enforced."""

    warn_kl: float = 0.2
    """KL per step above this emits `job.warning` (`kl_high`; `guardrails/kl`: the updated policy's
    KL to the reference)."""
    rollback_kl: float = 0.3
    """KL per step above this (or a non-finite loss/gradient) restores the state before the step
    (`guardrails/step_kl`: the updated policy's KL to the policy before the update; a rollback
    undoes one step, so it judges what the step did, not the drift a learning run accumulates)."""
    max_rollbacks: int = 3
    """After this many rollbacks the job fails with `diverged`."""
    rollback_lr_factor: float = 0.5
    """Mitigation: multiply the actor LR by this after a rollback."""
    rollback_clip_ratio: float = 0.1
    """Mitigation: tighten `clip_ratio` to this after a rollback."""
    step_timeout_s: float = 3600.0
    """A step longer than this fails the job with `step_timeout`."""
    reward_filter: RewardFilterConfig = RewardFilterConfig()
    min_entropy: float | None = None
    """Collapse: `actor/entropy` (mean per-token entropy of the update's samples) below this trips
    `collapse_action` (None: off)."""
    min_distinct_ratio: float | None = None
    """Collapse: `val/distinct_responses` (distinct responses / validation prompts) below this trips
    `collapse_action` (None: off)."""
    collapse_action: Literal["warn", "rollback"] = "warn"
    """What a collapse does: `warn` reports `collapse` (with decoded samples); `rollback` also
    restores the state before the step, as a KL rollback does."""
    max_logprob_diff: float | None = None
    """`rollout/logprob_diff/mean` (mean |rollout engine log-prob - trainer log-prob| per token)
    above this reports `logprob_gap` (None: off)."""


@dataclass(frozen=True)
class OverlongBufferConfig:
    """DAPO's soft overlong punishment: a response longer than `max_response_length - len` loses
    `(length - (max_response_length - len)) / len * penalty_factor` of its score (at most
    `penalty_factor`, at the full length)."""

    enable: bool = False
    len: int = 64
    """Tokens before `data.max_response_length` where the penalty starts."""
    penalty_factor: float = 1.0


@dataclass(frozen=True)
class RewardShapingConfig:
    """What is done to every sequence score before advantages (VERL: `reward_model`)."""

    overlong_buffer: OverlongBufferConfig = OverlongBufferConfig()


@dataclass(frozen=True)
class PPOConfig:
    """PPO with Actor / Critic / Reference / Reward roles (VERL's ppo_trainer config, trimmed)."""

    data: DataConfig = DataConfig(train_batch_size=64)
    model: ModelConfig = ModelConfig()
    actor: ActorConfig = ActorConfig()
    critic: CriticConfig = CriticConfig()
    ref: RefConfig = RefConfig()
    rollout: RolloutConfig = RolloutConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    reward: RewardShapingConfig = RewardShapingConfig()
    trainer: TrainerConfig = TrainerConfig(total_epochs=3)
    guardrails: GuardrailConfig = GuardrailConfig()


@dataclass(frozen=True)
class EvalDataConfig:
    """What an evaluation reads, and how long its generations may be (VERL `data` names)."""

    val_batch_size: int = 64
    """Prompts generated per batch (each `rollout.n` times), split over the workers."""
    max_prompt_length: int = 1024
    max_response_length: int = 2048
    truncation: Truncation = "error"
    filter_overlong_prompts: bool = False
    """Drop prompts longer than `max_prompt_length` (before any truncation)."""


@dataclass(frozen=True)
class EvalModelConfig:
    """How the evaluated models are held: frozen, in `dtype`."""

    dtype: Dtype = "float32"
    """Compute dtype of every model of the job (the policy, `compare_to`, a reward model)."""


@dataclass(frozen=True)
class EvalRolloutConfig:
    """Sampling (VERL `actor_rollout_ref.rollout` names), with the `hf` backend."""

    n: int = 1
    """Samples per prompt; pass@k is reported for k = 1, 2, 4, ... up to n."""
    temperature: float = 0.0
    """0 = greedy."""
    top_p: float = 1.0
    top_k: int = -1
    """-1 disables top-k."""


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation: sample responses to prompts and score them (no training, no output model)."""

    data: EvalDataConfig = EvalDataConfig()
    model: EvalModelConfig = EvalModelConfig()
    rollout: EvalRolloutConfig = EvalRolloutConfig()
    pass_threshold: float = 1.0
    """Rule rewards: a sample passes (for pass@k) when its score is at least this."""


METHOD_CONFIGS: dict[str, type] = {
    "sft": SFTConfig,
    "reward_model": RewardModelConfig,
    "rm_distill": RMDistillConfig,
    "dpo": DPOConfig,
    "ppo": PPOConfig,
    "eval": EvalConfig,
}


def build_config(cls: type, data: dict[str, Any] | None, prefix: str = "") -> Any:
    """Build a frozen config from a nested dict; unknown keys and wrong types raise `ConfigError`
    whose `param` is the dotted path (`actor.clip_ratio_c`)."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise ConfigError(f"unknown hyperparameter {prefix + key!r}", param=prefix + key)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        hint = hints[key]
        path = prefix + key
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{path} must be an object", param=path)
            kwargs[key] = build_config(hint, value, path + ".")
        else:
            kwargs[key] = _coerce(value, hint, path)
    config = cls(**kwargs)
    _check(config, prefix)
    return config


def _coerce(value: Any, hint: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for arm in typing.get_args(hint):
            try:
                return _coerce(value, arm, path)
            except ConfigError:
                continue
        raise ConfigError(f"{path} has an invalid value {value!r}", param=path)
    if origin is Literal:
        if value in typing.get_args(hint):
            return value
        raise ConfigError(f"{path} must be one of {list(typing.get_args(hint))}", param=path)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{path} must be a list", param=path)
        args = typing.get_args(hint)
        arms = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        if len(arms) != len(value):
            raise ConfigError(f"{path} must have {len(arms)} items", param=path)
        return tuple(_coerce(v, a, path) for v, a in zip(value, arms))
    if hint is type(None):
        if value is None:
            return None
        raise ConfigError(f"{path} must be null", param=path)
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if (hint is bool and isinstance(value, bool)) or (hint is str and isinstance(value, str)):
        return value
    if hint is int and is_number and isinstance(value, int):
        return value
    if hint is float and is_number and math.isfinite(value):
        return float(value)
    raise ConfigError(f"{path} has an invalid value {value!r}", param=path)


_POSITIVE = {"n", "horizon", "total_epochs", "total_training_steps", "ppo_epochs", "lora_alpha",
             "ulysses_sequence_parallel_size", "tensor_model_parallel_size"}
_POSITIVE_PARTS = ("batch_size", "max_", "token_len")
_NON_NEGATIVE = {"critic_warmup", "lora_rank", "max_rollbacks", "replay_buffer_size"}


def _check(config: Any, prefix: str) -> None:
    """Cross-field rules that a schema cannot express."""
    def fail(name: str, message: str) -> None:
        raise ConfigError(message, param=prefix + name)

    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        if f.name in _POSITIVE or any(part in f.name for part in _POSITIVE_PARTS):
            if value <= 0:
                fail(f.name, f"{prefix + f.name} must be positive")
        elif f.name in _NON_NEGATIVE and value < 0:
            fail(f.name, f"{prefix + f.name} must not be negative")
    if isinstance(config, ActorConfig):
        if config.clip_ratio_c <= 1.0:
            fail("clip_ratio_c", "clip_ratio_c must be > 1 (dual clip bounds -A * clip_ratio_c)")
        for name in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
            v = getattr(config, name)
            if v is not None and not 0.0 < v < 1.0:
                fail(name, f"{name} must lie in (0, 1)")
    if isinstance(config, OptimConfig) and config.lr <= 0:
        fail("lr", "lr must be positive")
    if isinstance(config, RolloutCorrectionConfig):
        if not config.rollout_is_threshold > 0:
            fail("rollout_is_threshold", "rollout_is_threshold must be positive")
        if not config.rollout_rs_threshold > 1:
            fail("rollout_rs_threshold", "rollout_rs_threshold must be above 1")
    if isinstance(config, GuardrailConfig):
        if config.min_entropy is not None and config.min_entropy < 0:
            fail("min_entropy", "min_entropy must not be negative")
        if config.min_distinct_ratio is not None and not 0.0 <= config.min_distinct_ratio <= 1.0:
            fail("min_distinct_ratio", "min_distinct_ratio must lie in [0, 1]")
        if config.max_logprob_diff is not None and not config.max_logprob_diff > 0:
            fail("max_logprob_diff", "max_logprob_diff must be positive")
    if isinstance(config, RolloutConfig) and not 0.0 < config.gpu_memory_utilization <= 1.0:
        fail("gpu_memory_utilization", "gpu_memory_utilization must lie in (0, 1]")
    for name in ("max_duration_s", "step_timeout_s"):
        seconds = getattr(config, name, None)
        if seconds is not None and not seconds > 0:
            fail(name, f"{prefix + name} must be positive")
    if isinstance(config, PPOConfig):
        if config.actor.ppo_mini_batch_size > config.data.train_batch_size:
            raise ConfigError("actor.ppo_mini_batch_size must not exceed data.train_batch_size",
                              param=prefix + "actor.ppo_mini_batch_size")
        estimator = config.algorithm.adv_estimator
        if estimator in GROUP_ESTIMATORS and config.rollout.n < 2:
            raise ConfigError(f"{estimator} needs rollout.n >= 2 (advantages are relative within a group)",
                              param=prefix + "rollout.n")
        if estimator != "gae" and config.guardrails.reward_filter.replay_buffer_size:
            raise ConfigError(f"replay needs adv_estimator gae: a replayed sample has no group under {estimator}",
                              param=prefix + "guardrails.reward_filter.replay_buffer_size")
        if config.algorithm.filter_groups.enable and estimator not in GROUP_ESTIMATORS:
            raise ConfigError("filter_groups needs a group estimator: grpo, rloo or reinforce_plus_plus_baseline",
                              param=prefix + "algorithm.filter_groups.enable")
        buffer = config.reward.overlong_buffer
        if buffer.enable and not 0 < buffer.len < config.data.max_response_length:
            raise ConfigError("reward.overlong_buffer.len must lie in (0, data.max_response_length)",
                              param=prefix + "reward.overlong_buffer.len")
    if isinstance(config, DPOConfig):
        if not config.beta > 0:
            fail("beta", "beta must be positive")
        if not 0.0 <= config.label_smoothing < 0.5:
            fail("label_smoothing", "label_smoothing must lie in [0, 0.5)")
        if config.label_smoothing and config.loss_type != "sigmoid":
            fail("label_smoothing", "label_smoothing applies to loss_type sigmoid only")
    if (isinstance(config, SFTConfig | RewardModelConfig | RMDistillConfig | DPOConfig)
            and config.micro_batch_size_per_gpu > config.data.train_batch_size):
        fail("micro_batch_size_per_gpu", "micro_batch_size_per_gpu must not exceed data.train_batch_size")
    _check_strategy(config, prefix)
    _check_sequence_parallel(config, prefix)


def _check_sequence_parallel(config: Any, prefix: str) -> None:
    """Ulysses shards packed rows only (VERL's rule too); tensor parallelism is vllm's."""
    roles = ({"actor": config.actor, "critic": config.critic, "ref": config.ref} if isinstance(config, PPOConfig)
             else {"": config} if isinstance(config, SFTConfig | RewardModelConfig) else {})
    for role, cfg in roles.items():
        name = f"{prefix}{role + '.' if role else ''}ulysses_sequence_parallel_size"
        if cfg.ulysses_sequence_parallel_size > 1 and not config.model.use_remove_padding:
            raise ConfigError(f"{name} > 1 needs model.use_remove_padding (packed rows)", param=name)
    if isinstance(config, PPOConfig) and config.rollout.tensor_model_parallel_size > 1 and config.rollout.name != "vllm":
        raise ConfigError("rollout.tensor_model_parallel_size > 1 needs rollout.name vllm",
                          param=f"{prefix}rollout.tensor_model_parallel_size")


def check_parallel(config: Any, resources: Resources) -> None:
    """Sequence-parallel groups must divide the workers; vllm's tensor parallelism the GPUs of one
    rollout worker. The API checks the same at create time."""
    sizes = ({"actor.": config.actor, "critic.": config.critic, "ref.": config.ref} if isinstance(config, PPOConfig)
             else {"": config} if isinstance(config, SFTConfig | RewardModelConfig) else {})
    for role, cfg in sizes.items():
        sp = cfg.ulysses_sequence_parallel_size
        if resources.num_workers % sp:
            raise ConfigError(f"{role}ulysses_sequence_parallel_size {sp} must divide resources.num_workers "
                              f"({resources.num_workers})", param=f"{role}ulysses_sequence_parallel_size")
    if isinstance(config, PPOConfig):
        tp, gpus = config.rollout.tensor_model_parallel_size, resources.gpus_per_worker
        if tp > 1 and (gpus != int(gpus) or int(gpus) % tp):
            raise ConfigError(f"rollout.tensor_model_parallel_size {tp} must divide the GPUs of a rollout worker "
                              f"(resources.gpus_per_worker {gpus:g})", param="rollout.tensor_model_parallel_size")


def _check_strategy(config: Any, prefix: str) -> None:
    """`strategy` / `fsdp_config` rules: offload knobs need fsdp2 (else they would do nothing), and
    fsdp2 does not shard PEFT models (their frozen base and adapters would need separate groups)."""
    if isinstance(config, ModelConfig | ActorConfig | CriticConfig) and config.strategy == "ddp":
        for name in ("param_offload", "optimizer_offload"):
            if getattr(config.fsdp_config, name):
                raise ConfigError(f"{prefix}fsdp_config.{name} needs {prefix}strategy fsdp2",
                                  param=f"{prefix}fsdp_config.{name}")
    if isinstance(config, ModelConfig) and config.strategy == "fsdp2" and (config.lora_rank or config.lora_adapter_path):
        raise ConfigError(f"{prefix}strategy fsdp2 does not support LoRA: set {prefix}lora_rank to 0 "
                          "or use strategy ddp", param=f"{prefix}strategy")
    if isinstance(config, PPOConfig):
        if config.model.strategy != "ddp":
            raise ConfigError("PPO sets the strategy per role: use actor.strategy and critic.strategy",
                              param=f"{prefix}model.strategy")
        lora = bool(config.model.lora_rank or config.model.lora_adapter_path)
        for role in ("actor", "critic"):
            if lora and getattr(config, role).strategy == "fsdp2":
                raise ConfigError(f"{role}.strategy fsdp2 does not support LoRA: set model.lora_rank to 0 "
                                  "or use strategy ddp", param=f"{prefix}{role}.strategy")


def config_to_dict(config: Any) -> dict[str, Any]:
    """The inverse of `build_config` (JSON-friendly: tuples become lists)."""
    def plain(v: Any) -> Any:
        return list(v) if isinstance(v, tuple) else v
    return {f.name: (config_to_dict(getattr(config, f.name))
                     if dataclasses.is_dataclass(getattr(config, f.name)) else plain(getattr(config, f.name)))
            for f in dataclasses.fields(config)}


@dataclass(frozen=True)
class Resources:
    """Where a job runs: data-parallel workers and what each gets."""

    num_workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    colocate: bool = True
    """PPO: put all roles on one set of resources (else one placement group bundle per role)."""
    placement: Literal["pack", "spread", "strict_spread"] = "pack"
    """How the workers' bundles go onto nodes: `pack` (as few nodes as fit), `spread` (as many as
    possible), `strict_spread` (one node per bundle, or wait). Ray's PACK / SPREAD / STRICT_SPREAD."""
    executor: Literal["local", "ray"] = "ray"
    """`ray`: workers are Ray actors (the controller, PPO's roles, data-parallel replicas). `local`:
    the job runs in the worker's own process on its one device, without Ray (one worker only)."""


@dataclass(frozen=True)
class JobRequest:
    """Everything a method needs to run. Artifact references (model, files, output, checkpoints,
    resume) are local paths of a store mounted on every node, or URLs of a remote store that each
    process stages or uploads itself (`engine.runtime.artifacts`); hub ids pass through."""

    job_id: str
    method: str
    config: Any
    """One of `METHOD_CONFIGS` values."""
    model_path: str
    training_file: str
    output_dir: str
    checkpoint_dir: str
    validation_file: str | None = None
    seed: int = 0
    resume_from: str | None = None
    """A checkpoint directory to continue from (exact resume)."""
    teacher_path: str | None = None
    """rm_distill: the teacher reward model."""
    reward: dict[str, Any] = field(default_factory=dict)
    """ppo, eval: `{"model_path": dir}` or `{"function": "gsm8k"}`."""
    compare_to_path: str | None = None
    """eval: the model whose responses the evaluated model's are judged against (win rate)."""
    resources: Resources = Resources()
    allowed_model_roots: tuple[str, ...] = ()
    ray_address: str | None = None
    time_used_s: float = 0.0
    """Seconds the job already ran before this attempt (`trainer.max_duration_s` counts them)."""
    storage_options: dict[str, Any] = field(default_factory=dict)
    """fsspec options (endpoint, credentials) of the store behind any URL above (`engine.runtime.artifacts`)."""
    artifact_cache_dir: str | None = None
    """Node-local directory where remote artifacts are staged (None: `<system temp>/keel-artifacts`)."""


@dataclass(frozen=True)
class ResultFile:
    """A file a method wrote for the user (not a model); the service registers it as a File."""

    purpose: str
    """The File purpose, e.g. `eval_results`."""
    name: str
    """Its name inside the job's `output_dir`."""
    rows: int


@dataclass(frozen=True)
class JobResult:
    """What a finished method hands back: the output model (None for methods without one, such as
    `eval`), the final metrics and any result files."""

    output_dir: str
    model_format: Literal["hf", "lora"] | None
    model_kind: Literal["policy", "reward_model", "value_model"] | None
    metrics: dict[str, float] = field(default_factory=dict)
    files: tuple[ResultFile, ...] = ()
