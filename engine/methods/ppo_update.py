"""The update phase of a PPO step: the critic and actor updates submitted together (the actor only
after `trainer.critic_warmup`), and the check of the rollout engine's log-probs against the trainer's.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.algos.correction import logprob_gap
from engine.config import PPOConfig
from engine.methods.ppo_dispatch import RoleDispatch
from engine.roles.batch import select, shard_rows
from engine.runtime.reporting import Reporter


def update(dispatch: RoleDispatch, cfg: PPOConfig, step: int, rollout: dict[str, Any], adv: dict[str, Any],
           deadline: float, *, num_critic_mini_batches: int,
           ) -> tuple[dict[str, list[Any]], torch.Tensor, torch.Tensor | None]:
    """Critic and actor updates, submitted together (the actor only after `critic_warmup`).

    Returns the workers' results, the updated policy's log-probs of the batch (the rollout
    log-probs when the actor did not update) and, on-policy, the sampling policy's log-probs
    the update computed before its step (else None).
    """
    roles, old = dispatch.roles, rollout["old"]
    train = dict(rollout["batch"], response_mask=adv["loss_mask"],
                 ref_log_probs=rollout["ref"], advantages=adv["advantages"], returns=adv["returns"])
    if old is not None:  # on-policy: the actor takes its own forward's log-probs as the old ones
        train["old_log_probs"] = old
    if dispatch.use_critic:
        train["values"] = rollout["values"]
    n = len(rollout["ref"])
    refs: dict[str, list[Any]] = {"actor": [], "critic": []}
    if dispatch.use_critic:
        c_rows, c_sizes = shard_rows(n, num_critic_mini_batches, dispatch.num_workers)
        refs["critic"] = [roles["critic"].submit(w, "update_critic", select(train, r), s)
                          for w, (r, s) in enumerate(zip(c_rows, c_sizes))]
    a_rows, a_sizes = shard_rows(n, dispatch.num_mini_batches, dispatch.num_workers)
    if step > cfg.trainer.critic_warmup:
        refs["actor"] = [roles["actor"].submit(w, "update_actor", select(train, r), s)
                         for w, (r, s) in enumerate(zip(a_rows, a_sizes))]
    updates = dispatch.gather(refs, deadline, "update", step)
    if not updates["actor"]:
        return updates, old, None
    new_log_probs = torch.empty_like(rollout["ref"])
    sampling = torch.empty_like(rollout["ref"]) if old is None else None
    for r, result in zip(a_rows, updates["actor"]):
        new_log_probs[torch.tensor(r)] = result["log_probs"]
        if sampling is not None:
            sampling[torch.tensor(r)] = result["sampling_log_probs"]
    return updates, new_log_probs, sampling


def logprob_gap_metrics(reporter: Reporter, cfg: PPOConfig, step: int, rollout: dict[str, Any],
                        sampling_log_probs: torch.Tensor | None, mask: torch.Tensor) -> dict[str, float]:
    """`rollout/logprob_diff/mean|max`: the rollout engine's log-probs of the sampled tokens vs
    the trainer's forward on them under the same weights (the old log-probs); a `logprob_gap`
    warning above `guardrails.max_logprob_diff`. Nothing when the backend gave no log-probs."""
    batch = rollout["batch"]
    trainer = rollout["old"] if rollout["old"] is not None else sampling_log_probs
    if "rollout_log_probs" not in batch or trainer is None:
        return {}
    mean, top = logprob_gap(batch["rollout_log_probs"], trainer, mask)
    limit = cfg.guardrails.max_logprob_diff
    if limit is not None and mean > limit:
        reporter.warning("logprob_gap", f"step {step}: the rollout engine's log-probs differ from the "
                         f"trainer's by {mean:.4f} per token on average (max_logprob_diff {limit:g})",
                         {"step": step, "mean": mean, "max": top, "max_logprob_diff": limit})
    return {"rollout/logprob_diff/mean": mean, "rollout/logprob_diff/max": top}
