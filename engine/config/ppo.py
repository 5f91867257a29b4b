"""PPO's config (VERL's ppo_trainer names, trimmed): the actor, critic, reference and rollout roles,
the advantage algorithm, the reward shaping and the guardrails that watch each step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.config.sections import (
    DataConfig,
    FSDPConfig,
    LossAggMode,
    ModelConfig,
    OptimConfig,
    Strategy,
    TrainerConfig,
)


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
class MultiTurnConfig:
    """Multi-turn episodes (agentic RL): each prompt row runs as an episode against its environment
    (the job's `environment`, or the row's `environment` column), the policy trained on the tokens
    it sampled only (`engine.rollout.episodes`, docs/agentic-rl.md)."""

    enable: bool = False
    max_turns: int = 4
    """Assistant turns per episode; an episode still going after them is truncated."""
    max_tool_calls: int = 8
    """Tool calls per episode; past them the episode is truncated."""
    max_episode_tokens: int = 0
    """Tokens after the prompt (assistant and environment); 0: `data.max_response_length`."""
    max_tokens_per_turn: int = 0
    """Tokens one assistant turn may sample; 0: what is left of the episode's budget."""
    tool_format: Literal["hermes"] = "hermes"
    """How tool calls are written in the assistant text (`<tool_call>{json}</tool_call>`)."""
    max_failed_frac: float = 0.25
    """More than this fraction of a step's episodes failed (the environment raised) fails the job
    (`environment_failed`); below it the failed episodes train nothing and are counted."""


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
    mode: Literal["sync", "one_step_off", "async"] = "sync"
    """`sync`: generate, then train on what was generated. `one_step_off`: batch k+1 is generated
    while the trainer updates on batch k, so its samples are one version behind.
    `async`: generation runs up to `max_staleness` batches ahead (see `engine.methods.ppo_async`)."""
    max_staleness: int = 1
    """async: a sample comes from a policy at most this many versions behind the one it trains."""
    colocate: bool = True
    """False: generation runs on its own workers (`resources.rollout_workers`), fed weights by version."""
    partial: Literal["finish", "continue"] = "finish"
    """A batch whose generation is in flight at a weight update: `finish` on the version it started
    with (counted stale), or `continue` its remaining prompt groups on the new version."""
    weight_sync: Literal["object_store", "collective"] | None = None
    """How separate rollout workers get each version: read from the Ray object store, or broadcast by
    the trainer over a process group they join (gloo on CPU, NCCL on GPU). None: `collective` on GPU,
    `object_store` on CPU (see `engine.runtime.weight_sync`)."""
    multi_turn: MultiTurnConfig = MultiTurnConfig()
    source: Literal["generate", "trajectories"] = "generate"
    """`trajectories`: train on recorded, scored agent calls (`engine.methods.ppo_trajectories`)."""
    trajectory_filter: Literal["unconsumed", "all"] = "unconsumed"
    """Which scored trajectories the service snapshots for the job (read by the API, not the engine)."""

    @property
    def staleness(self) -> int:
        """Versions a sample's policy lags the trainer's by (0: sync)."""
        return {"sync": 0, "one_step_off": 1}.get(self.mode, self.max_staleness)


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
