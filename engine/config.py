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

Dtype = Literal["float32", "bfloat16"]
Truncation = Literal["error", "left", "right"]
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


@dataclass(frozen=True)
class ModelConfig:
    """How the trained model is loaded (VERL: `actor_rollout_ref.model`)."""

    dtype: Dtype = "float32"
    """Parameter dtype; `bfloat16` halves memory, `float32` is exact on CPU."""
    enable_gradient_checkpointing: bool = False
    """Recompute activations in backward: less memory, about 30% more compute."""
    use_remove_padding: bool = True
    """Pack sequences without padding where the attention implementation allows it."""
    lora_rank: int | Literal["auto"] = 0
    """0 = full fine-tuning; `auto` picks by parameter count (<1B: 32, <10B: 64, else 128)."""
    lora_alpha: int = 16
    """LoRA scaling numerator (scale = alpha / rank)."""
    target_modules: str | tuple[str, ...] = "all-linear"
    """Modules that get adapters; `all-linear` as in the recipe."""
    lora_adapter_path: str | None = None
    """Continue from an existing adapter directory (`adapter_model.safetensors`)."""


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
    critic_warmup: int = 0
    """PPO only: steps that train the critic before the actor starts updating."""


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
    shuffle: bool = True

    @property
    def max_total_length(self) -> int:
        return self.max_length or (self.max_prompt_length + self.max_response_length)


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
    loss: Literal["kl", "mse"] = "kl"
    """`kl`: KL(Bern(sigmoid(t_c - t_r)) || Bern(sigmoid(s_c - s_r))); `mse`: on standardised score gaps."""
    gate_kl: float = 0.05
    """Held-out mean KL the student must stay below, else the job fails with `distill_gate`."""


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


@dataclass(frozen=True)
class KLControlConfig:
    """KL coefficient control (VERL: `algorithm.kl_ctrl`)."""

    type: Literal["fixed", "adaptive"] = "adaptive"
    kl_coef: float = 0.001
    target_kl: float = 0.1
    horizon: int = 10000


@dataclass(frozen=True)
class AlgorithmConfig:
    """Advantage estimation and KL-in-reward (VERL: `algorithm`)."""

    adv_estimator: Literal["gae", "grpo"] = "gae"
    gamma: float = 1.0
    lam: float = 0.95
    use_kl_in_reward: bool = True
    kl_penalty: Literal["kl", "abs", "mse", "low_var_kl"] = "kl"
    kl_ctrl: KLControlConfig = KLControlConfig()
    norm_adv_by_std_in_grpo: bool = True


@dataclass(frozen=True)
class RewardFilterConfig:
    """PF-PPO style filtering of unreliable rewards (Zhang et al. 2024, arXiv:2409.06957)."""

    enable: bool = False
    drop_middle_quantile: float = 0.5
    """Share of samples around the median reward to drop (their rewards are the least reliable)."""
    replay_buffer_size: int = 0
    """Kept high-confidence samples replayed in later steps (0 disables replay)."""


@dataclass(frozen=True)
class GuardrailConfig:
    """The recipe's monitoring points, enforced."""

    warn_kl: float = 0.2
    """KL per step above this emits `job.warning`."""
    rollback_kl: float = 0.3
    """KL per step above this (or a non-finite loss/gradient) restores the last good checkpoint."""
    max_rollbacks: int = 3
    """After this many rollbacks the job fails with `diverged`."""
    rollback_lr_factor: float = 0.5
    """Mitigation: multiply the actor LR by this after a rollback."""
    rollback_clip_ratio: float = 0.1
    """Mitigation: tighten `clip_ratio` to this after a rollback."""
    step_timeout_s: float = 3600.0
    """A step longer than this fails the job with `step_timeout`."""
    reward_filter: RewardFilterConfig = RewardFilterConfig()


@dataclass(frozen=True)
class PPOConfig:
    """PPO with Actor / Critic / Reference / Reward roles (VERL's ppo_trainer config, trimmed)."""

    data: DataConfig = DataConfig(train_batch_size=64)
    model: ModelConfig = ModelConfig()
    actor: ActorConfig = ActorConfig()
    critic: CriticConfig = CriticConfig()
    rollout: RolloutConfig = RolloutConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    trainer: TrainerConfig = TrainerConfig(total_epochs=3)
    guardrails: GuardrailConfig = GuardrailConfig()


METHOD_CONFIGS: dict[str, type] = {
    "sft": SFTConfig,
    "reward_model": RewardModelConfig,
    "rm_distill": RMDistillConfig,
    "ppo": PPOConfig,
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


_POSITIVE = {"n", "horizon", "total_epochs", "total_training_steps", "ppo_epochs", "lora_alpha"}
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
    if isinstance(config, PPOConfig):
        if config.actor.ppo_mini_batch_size > config.data.train_batch_size:
            raise ConfigError("actor.ppo_mini_batch_size must not exceed data.train_batch_size",
                              param=prefix + "actor.ppo_mini_batch_size")
        if config.algorithm.adv_estimator == "grpo" and config.rollout.n < 2:
            raise ConfigError("grpo needs rollout.n >= 2 (advantages are relative within a group)",
                              param=prefix + "rollout.n")
    if (isinstance(config, SFTConfig | RewardModelConfig | RMDistillConfig)
            and config.micro_batch_size_per_gpu > config.data.train_batch_size):
        fail("micro_batch_size_per_gpu", "micro_batch_size_per_gpu must not exceed data.train_batch_size")


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


@dataclass(frozen=True)
class JobRequest:
    """Everything a method needs to run, resolved by the caller to local paths."""

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
    """ppo: `{"model_path": dir}` or `{"function": "gsm8k"}`."""
    resources: Resources = Resources()
    allowed_model_roots: tuple[str, ...] = ()
    ray_address: str | None = None


@dataclass(frozen=True)
class JobResult:
    """What a finished method hands back: the output model and the final metrics."""

    output_dir: str
    model_format: Literal["hf", "lora"]
    model_kind: Literal["policy", "reward_model", "value_model"]
    metrics: dict[str, float] = field(default_factory=dict)
