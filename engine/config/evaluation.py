"""The evaluation method's config: prompts, the evaluated model, how it samples, what passes."""

from __future__ import annotations

from dataclasses import dataclass

from engine.config.sections import Dtype, Truncation


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
