"""PPO's hyperparameters (VERL's ppo_trainer names): the actor, critic, reference and rollout sections,
advantage estimation, reward shaping, the guardrails, and `PPOConfig`'s cross-section checks."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from api.schemas.hyperparameters.fields import (
    MAX_SIZE,
    Coef,
    Epochs,
    KLType,
    LossAggMode,
    Ratio,
    SequenceParallel,
    Share,
    Size,
    Strategy,
    Strict,
    errors_at,
)
from api.schemas.hyperparameters.sections import (
    ActorOptimConfig,
    DataConfig,
    FSDPConfig,
    ModelConfig,
    OptimConfig,
    PPOTrainerConfig,
    _offload_needs_fsdp2,
    _sp_needs_packing,
)


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


class MultiTurnConfig(Strict):
    """Multi-turn episodes (agentic RL, docs/agentic-rl.md): each prompt runs as an episode against its
    environment (the job's `method.environment`, or the row's `environment` column); the policy trains
    on the tokens it sampled only. Needs `rollout.mode: sync` with `colocate: true`, and no replay."""

    enable: bool = False
    max_turns: Annotated[int, Field(ge=1, le=256)] = 4
    """Assistant turns per episode; an episode still going after them is truncated."""
    max_tool_calls: Annotated[int, Field(ge=1, le=1024)] = 8
    """Tool calls per episode; past them the episode is truncated."""
    max_episode_tokens: Annotated[int, Field(ge=0, le=MAX_SIZE)] = 0
    """Tokens after the prompt (assistant and environment); 0: `data.max_response_length` (at most that)."""
    max_tokens_per_turn: Annotated[int, Field(ge=0, le=MAX_SIZE)] = 0
    """Tokens one assistant turn may sample; 0: what is left of the episode's budget."""
    tool_format: Literal["hermes"] = "hermes"
    """How tool calls are written in the assistant text (`<tool_call>{json}</tool_call>`)."""
    max_failed_frac: Share = 0.25
    """More than this fraction of a step's episodes failed (the environment raised) fails the job
    with `environment_failed`; below it the failed episodes train nothing (`episode/failed`)."""


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
    mode: Literal["sync", "one_step_off", "async"] = "sync"
    """`sync`: generate, then train on it. `one_step_off`: batch k+1 is generated while the trainer
    updates on batch k (samples one policy version behind). `async`: generation runs up to
    `max_staleness` batches ahead; needs `colocate: false`. Not with `algorithm.filter_groups`, a
    replay buffer or `remax`."""
    max_staleness: Annotated[int, Field(ge=1, le=16)] = 1
    """async: a sample comes from a policy at most this many versions behind the one it trains."""
    colocate: bool = True
    """False: generation runs on its own workers (`resources.rollout_workers`, at least 1), fed
    the trainer's weights by version."""
    partial: Literal["finish", "continue"] = "finish"
    """A batch whose generation is in flight at a weight update: `finish` on the version it started
    with (counted stale), or `continue` its remaining prompt groups on the new version (needs
    `colocate: false` and a mode other than `sync`)."""
    weight_sync: Literal["object_store", "collective"] | None = None
    """How rollout workers (`colocate: false`) get each policy version: read from the Ray object
    store, or broadcast by the trainer over a process group they join (gloo on CPU, NCCL on GPU).
    Unset: `collective` on GPU workers, `object_store` on CPU."""
    multi_turn: MultiTurnConfig = Field(default_factory=MultiTurnConfig)
    source: Literal["generate", "trajectories"] = "generate"
    """`generate`: sample `n` responses per prompt of the training file. `trajectories`: train on the
    project's recorded, scored agent calls instead (docs/trajectories.md): no generation, no reward
    function; a step takes `data.train_batch_size` groups (`group_id`) of trajectories."""
    trajectory_filter: Literal["unconsumed", "all"] = "unconsumed"
    """`source: trajectories`: take the scored trajectories no job consumed yet, or `all` scored ones."""


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
    product over its tokens) weighted by the ratio, capped at `rollout_is_threshold` (None: off).
    Unset, with neither it nor `rollout_rs` given and `rollout.mode` one_step_off or async: `token`
    (stale samples; an explicit null keeps it off)."""
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
        _async_rollout(self, problems)
        _multi_turn(self, problems)
        _trajectory_source(self, problems)
        if self.rollout.tensor_model_parallel_size > 1 and self.rollout.name != "vllm":
            problems.append((("rollout", "tensor_model_parallel_size"), self.rollout.tensor_model_parallel_size,
                             "rollout.tensor_model_parallel_size > 1 needs rollout.name vllm"))
        if problems:
            raise errors_at("PPOConfig", *problems)
        return self


def _async_rollout(cfg: PPOConfig, problems: list) -> None:
    """What a pipelined rollout (`rollout.mode` other than `sync`, or `rollout.colocate: false`:
    batches generated ahead of their step) cannot serve."""
    r = cfg.rollout
    if r.mode == "async" and r.colocate:
        problems.append((("rollout", "mode"), r.mode, ("rollout.mode async needs rollout.colocate false "
                                                       "(generation on its own workers, resources.rollout_workers)")))
    if r.partial == "continue" and (r.colocate or r.mode == "sync"):
        problems.append((("rollout", "partial"), r.partial, ("rollout.partial continue needs rollout.colocate "
                                                             "false and rollout.mode one_step_off or async")))
    if r.weight_sync is not None and r.colocate:
        problems.append((("rollout", "weight_sync"), r.weight_sync, ("rollout.weight_sync needs rollout.colocate "
                                                                     "false (weights sent to rollout workers)")))
    if r.mode == "sync" and r.colocate:
        return
    where = ("rollout", "mode") if r.mode != "sync" else ("rollout", "colocate")
    value = r.mode if r.mode != "sync" else r.colocate
    why = "a pipelined rollout generates each batch ahead of its step, so it does not support "
    if cfg.algorithm.filter_groups.enable:
        problems.append((where, value, why + "algorithm.filter_groups (more batches generated in step)"))
    if cfg.guardrails.reward_filter.replay_buffer_size:
        problems.append((where, value, why + "guardrails.reward_filter.replay_buffer_size (replayed rows re-scored)"))
    if cfg.algorithm.adv_estimator == "remax":
        problems.append((where, value, why + "adv_estimator remax (its greedy baseline is sampled in step)"))


def _multi_turn(cfg: PPOConfig, problems: list) -> None:
    """Episodes run in the step that trains on them and are never replayed."""
    turns, r = cfg.rollout.multi_turn, cfg.rollout
    if not turns.enable:
        return
    if turns.max_episode_tokens > cfg.data.max_response_length:
        problems.append((("rollout", "multi_turn", "max_episode_tokens"), turns.max_episode_tokens,
                         "rollout.multi_turn.max_episode_tokens must not exceed data.max_response_length"))
    if r.mode != "sync" or not r.colocate:
        problems.append((("rollout", "multi_turn", "enable"), True,
                         "rollout.multi_turn needs rollout.mode sync with rollout.colocate true"))
    if r.source != "generate":  # recorded trajectories are episodes already (docs/trajectories.md)
        problems.append((("rollout", "multi_turn", "enable"), True,
                         "rollout.multi_turn runs episodes: it needs rollout.source generate"))
    if cfg.guardrails.reward_filter.replay_buffer_size:
        problems.append((("rollout", "multi_turn", "enable"), True,
                         "rollout.multi_turn does not replay samples: set replay_buffer_size to 0"))


def _trajectory_source(cfg: PPOConfig, problems: list) -> None:
    """Recorded trajectories are trained as they are: nothing is generated in or ahead of a step."""
    r = cfg.rollout
    if r.source != "trajectories":
        return
    why = "rollout.source trajectories generates nothing, so it does not support "
    for needs, what in ((r.mode != "sync" or not r.colocate, "a pipelined rollout (mode sync, colocate true)"),
                        (r.multi_turn.enable, "rollout.multi_turn"),
                        (cfg.algorithm.filter_groups.enable, "algorithm.filter_groups"),
                        (cfg.algorithm.adv_estimator == "remax", "adv_estimator remax"),
                        (cfg.guardrails.reward_filter.enable, "guardrails.reward_filter")):
        if needs:
            problems.append((("rollout", "source"), r.source, why + what))
