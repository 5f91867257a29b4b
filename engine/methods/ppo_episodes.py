"""The driver's side of multi-turn episodes (`rollout.multi_turn`): what every episode row needs before a
step (an environment), what ends a job (too many failed episodes) and the `episode/*` metrics. The actor
runs the episodes (`engine.roles.episode_batch`); rows carry their columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from engine.config import JobRequest, PPOConfig
from engine.data import PromptExample
from engine.environments.building import TYPES, EnvironmentContext
from engine.errors import ConfigError, EngineError
from engine.roles.batch import Batch, response_extent
from engine.roles.episode_batch import stat, transcript


class EnvironmentFailed(EngineError):
    """More of a step's episodes failed than `rollout.multi_turn.max_failed_frac` allows."""

    code = "environment_failed"
    user_error = True


def context(request: JobRequest) -> EnvironmentContext:
    """What every environment of the job shares: the deployment's allowed hosts (the worker adds
    `environment_allowed_hosts` to the request) and the job's seed."""
    python = getattr(request, "environment_python", {})
    return EnvironmentContext(allowed_hosts=tuple(getattr(request, "environment_allowed_hosts", None) or ()),
                              python_limits=python or None, python_allowed=python is not None, seed=request.seed)


def check_prompts(cfg: PPOConfig, prompts: Sequence[PromptExample], file_param: str) -> None:
    """With `rollout.multi_turn`, every row needs an environment of a known type (its own or the job's)."""
    if not cfg.rollout.multi_turn.enable:
        return
    for row, p in enumerate(prompts):
        spec = p.environment
        if not spec:
            raise ConfigError(f"rollout.multi_turn needs an environment: row {row} of the {file_param} has no "
                              "environment column and the job sets no method.environment", param="environment")
        if spec.get("type") not in TYPES:
            raise ConfigError(f"row {row} of the {file_param}: unknown environment type {spec.get('type')!r} "
                              f"(one of {', '.join(TYPES)})", param="environment")


def failed_rows(batch: Batch) -> torch.Tensor | None:
    """`(batch,)` bool: episodes whose environment failed (None: not an episode batch)."""
    return stat(batch, "failed") > 0 if "episode_stats" in batch else None


def check_failed(cfg: PPOConfig, batch: Batch, rows: int, step: int) -> None:
    """Fail the job when more than `max_failed_frac` of the first `rows` (the step's new episodes) failed."""
    failed = failed_rows(batch)
    if failed is None or not rows:
        return
    count = int(failed[:rows].sum())
    limit = cfg.rollout.multi_turn.max_failed_frac
    if count / rows > limit:
        first = int(failed[:rows].nonzero()[0, 0])
        why = transcript(batch, first).get("failed") or "unknown"
        raise EnvironmentFailed(f"step {step}: {count} of {rows} episodes failed in their environment, more than "
                                f"rollout.multi_turn.max_failed_frac={limit:g} (the first: {why})",
                                param="rollout.multi_turn.max_failed_frac",
                                data={"step": step, "failed": count, "episodes": rows, "first_failure": why})


def metrics(batch: Batch, new: slice) -> dict[str, float]:
    """`episode/*` and `timing_s/env` of the step's new rows (nothing for a single-turn batch)."""
    if "episode_stats" not in batch:
        return {}
    turns = stat(batch, "turns")[new]
    extent = response_extent(batch)[new].float()
    return {
        "episode/turns/mean": float(turns.mean()),
        "episode/turns/max": float(turns.max()),
        "episode/tool_calls/mean": float(stat(batch, "tool_calls")[new].mean()),
        "episode/tool_errors/mean": float(stat(batch, "tool_errors")[new].mean()),
        "episode/length/mean": float(extent.mean()),
        "episode/truncated": float(stat(batch, "truncated")[new].mean()),
        "episode/failed": float(stat(batch, "failed")[new].mean()),
        # Summed over the step's episodes: a batch's environments answer concurrently, so this is the
        # environments' busy time, more than the wall time the step spent waiting on them.
        "timing_s/env": float(stat(batch, "env_seconds")[new].sum()),
    }


def sample_fields(batch: Batch, row: int) -> dict[str, Any]:
    """What a `job.samples` row of an episode carries besides prompt, response and reward."""
    record = transcript(batch, row)
    return {"messages": record.get("messages", []), "turn_rewards": record.get("turn_rewards", []),
            "turns": int(stat(batch, "turns")[row]), "tool_calls": int(stat(batch, "tool_calls")[row])}
