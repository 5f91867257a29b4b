"""A job's config built from the API's validated dict (`build_config`: unknown keys and wrong types
raise `ConfigError` with the dotted path of the offender), the cross-field rules a schema cannot
express, and the inverse (`config_to_dict`)."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal

from engine.config.distill import DistillConfig, DistillPolicyConfig
from engine.config.evaluation import EvalConfig
from engine.config.job import Resources
from engine.config.ppo import (
    GROUP_ESTIMATORS,
    ActorConfig,
    CriticConfig,
    GuardrailConfig,
    MultiTurnConfig,
    PPOConfig,
    RolloutConfig,
    RolloutCorrectionConfig,
)
from engine.config.sections import ModelConfig, OptimConfig
from engine.config.supervised import DPOConfig, RewardModelConfig, RMDistillConfig, SFTConfig
from engine.errors import ConfigError

METHOD_CONFIGS: dict[str, type] = {
    "sft": SFTConfig,
    "reward_model": RewardModelConfig,
    "rm_distill": RMDistillConfig,
    "dpo": DPOConfig,
    "ppo": PPOConfig,
    "distill_policy": DistillPolicyConfig,
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
    if isinstance(config, PPOConfig):
        config = _default_rollout_correction(config, data)
    _check(config, prefix)
    return config


def _default_rollout_correction(config: PPOConfig, data: dict[str, Any]) -> PPOConfig:
    """Stale samples (`rollout.mode` one_step_off or async) default to truncated importance sampling
    per token (`algorithm.rollout_correction.rollout_is: token`): PPO's ratio and clip are then taken
    against the trainer's policy and the capped weight pi_old / pi_behaviour corrects for the sampling
    one; clipped against a policy two versions old, the update drops tokens and learns less per step
    (docs/async-rollout.md). Only when the job sets neither `rollout_is` nor `rollout_rs` (an explicit
    null keeps it off)."""
    given = (data.get("algorithm") or {}).get("rollout_correction") or {}
    if config.rollout.staleness == 0 or "rollout_is" in given or "rollout_rs" in given:
        return config
    corr = dataclasses.replace(config.algorithm.rollout_correction, rollout_is="token")
    return dataclasses.replace(config, algorithm=dataclasses.replace(config.algorithm, rollout_correction=corr))


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
             "ulysses_sequence_parallel_size", "tensor_model_parallel_size", "max_staleness"}
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
        if f.name in ("max_episode_tokens", "max_tokens_per_turn"):  # 0: no cap of its own
            if value < 0:
                fail(f.name, f"{prefix + f.name} must not be negative")
        elif f.name in _POSITIVE or any(part in f.name for part in _POSITIVE_PARTS):
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
    if isinstance(config, MultiTurnConfig) and not 0.0 <= config.max_failed_frac <= 1.0:
        fail("max_failed_frac", f"{prefix}max_failed_frac must lie in [0, 1]")
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
        _check_multi_turn(config, prefix)
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
    if isinstance(config, PPOConfig):
        _check_pipelined(config, prefix)
    if isinstance(config, DistillConfig) and not config.reverse_kl_coef > 0:
        fail("reverse_kl_coef", f"{prefix}reverse_kl_coef must be positive")
    if isinstance(config, DistillConfig) and not config.task_reward_weight >= 0:
        fail("task_reward_weight", f"{prefix}task_reward_weight must not be negative")
    if isinstance(config, DistillPolicyConfig):
        _check_distill(config, prefix)


def _check_distill(config: DistillPolicyConfig, prefix: str) -> None:
    """The teacher scores the tokens a step samples, in the step: what reuses or generates rows
    elsewhere has no teacher log-probs."""
    if config.algorithm.adv_estimator == "remax":
        raise ConfigError("distill_policy does not support adv_estimator remax (its greedy baseline has no "
                          "teacher reward)", param=prefix + "algorithm.adv_estimator")
    if config.guardrails.reward_filter.replay_buffer_size:
        raise ConfigError("distill_policy does not replay samples (a replayed sample has no teacher log-probs)",
                          param=prefix + "guardrails.reward_filter.replay_buffer_size")
    if config.rollout.mode != "sync" or not config.rollout.colocate:
        raise ConfigError("distill_policy needs rollout.mode sync with rollout.colocate true (the teacher scores "
                          "each batch in its step)", param=prefix + "rollout.mode")


def _check_multi_turn(config: PPOConfig, prefix: str) -> None:
    """Episodes are run by the actor in the step that trains on them, and are never replayed (a
    replayed row would carry no episode)."""
    turns = config.rollout.multi_turn
    if not turns.enable:
        return
    if turns.max_episode_tokens > config.data.max_response_length:
        raise ConfigError("rollout.multi_turn.max_episode_tokens must not exceed data.max_response_length",
                          param=prefix + "rollout.multi_turn.max_episode_tokens")
    if config.rollout.mode != "sync" or not config.rollout.colocate:
        raise ConfigError("rollout.multi_turn needs rollout.mode sync with rollout.colocate true",
                          param=prefix + "rollout.multi_turn.enable")
    if config.rollout.source != "generate":  # recorded trajectories are episodes already (docs/trajectories.md)
        raise ConfigError("rollout.multi_turn runs episodes: it needs rollout.source generate",
                          param=prefix + "rollout.multi_turn.enable")
    if config.guardrails.reward_filter.replay_buffer_size:
        raise ConfigError("rollout.multi_turn does not replay samples: set "
                          "guardrails.reward_filter.replay_buffer_size to 0",
                          param=prefix + "rollout.multi_turn.enable")


def _check_pipelined(config: PPOConfig, prefix: str) -> None:
    """A pipelined rollout (`rollout.mode` other than `sync`, or `rollout.colocate: false`) generates
    each batch ahead of its step: what needs batches made in step cannot come with it."""
    r = config.rollout
    if r.mode == "async" and r.colocate:
        raise ConfigError("rollout.mode async needs rollout.colocate false", param=prefix + "rollout.mode")
    if r.partial == "continue" and (r.colocate or r.mode == "sync"):
        raise ConfigError("rollout.partial continue needs rollout.colocate false and rollout.mode one_step_off "
                          "or async", param=prefix + "rollout.partial")
    if r.weight_sync is not None and r.colocate:
        raise ConfigError("rollout.weight_sync needs rollout.colocate false (weights sent to rollout workers)",
                          param=prefix + "rollout.weight_sync")
    if r.mode == "sync" and r.colocate:
        return
    where = prefix + ("rollout.mode" if r.mode != "sync" else "rollout.colocate")
    a = config.algorithm
    for name, on in (("algorithm.filter_groups", a.filter_groups.enable),
                     ("guardrails.reward_filter.replay_buffer_size", config.guardrails.reward_filter.replay_buffer_size),
                     ("adv_estimator remax", a.adv_estimator == "remax")):
        if on:
            raise ConfigError(f"a pipelined rollout generates each batch ahead of its step, so it does not "
                              f"support {name}", param=where)


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
