"""Evaluation's hyperparameters: what it reads, how its models are held, how it samples, what passes."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from api.schemas.hyperparameters.fields import MAX_SIZE, Dtype, Size, Strict, Truncation


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
