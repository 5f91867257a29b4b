"""A PPO step's experience between generation and the update: reward shaping (DAPO's overlong
buffer), dynamic sampling's group selection, the step's advantages (PF-PPO filtering, the KL penalty
in the reward, the estimator the job chose) and the step's metrics.

Rollouts are the dicts `engine.methods.ppo_rollout.collect` returns: `batch` (a `Batch`), per-row tensors
`old`, `ref`, `values` (None without a critic), `teacher` (distillation only), `scores`, and `uids` (prompt id per row), `prompts`,
`new_rows`, `replayed`, `timing`. No Ray, no I/O.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from engine.algos import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_in_reward,
    compute_gae,
    compute_grpo_advantages,
    compute_reinforce_plus_plus_advantages,
    compute_reinforce_plus_plus_baseline_advantages,
    compute_remax_advantages,
    compute_rloo_advantages,
    explained_variance,
    group_has_signal,
    kl_penalty,
    last_index,
    masked_mean,
    masked_var,
    overlong_penalty,
    reverse_kl_rewards,
)
from engine.config import AlgorithmConfig, PPOConfig
from engine.guardrails import ReplayBuffer, reward_filter_mask
from engine.methods import ppo_episodes
from engine.roles.base import MetricSums
from engine.roles.batch import concat, response_extent, select

_ROW_TENSORS = ("old", "ref", "values", "scores", "baselines", "overlong", "teacher")


def shape_scores(scores: torch.Tensor, response_lengths: torch.Tensor, cfg: PPOConfig) -> tuple[torch.Tensor,
                                                                                               torch.Tensor | None]:
    """`(scores, penalty)`: the scores with the overlong penalty added when it is enabled (else the
    scores as they are and None)."""
    buffer = cfg.reward.overlong_buffer
    if not buffer.enable:
        return scores, None
    penalty = overlong_penalty(response_lengths, cfg.data.max_response_length, buffer.len, buffer.penalty_factor)
    return scores + penalty.to(scores.dtype), penalty


def merge(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several generation batches as one rollout; prompt ids stay distinct across parts."""
    if len(parts) == 1:
        return parts[0]
    uids: list[Any] = []
    for k, part in enumerate(parts):
        uids += [(k, uid) for uid in part["uids"]]
    out = {"batch": concat([p["batch"] for p in parts]), "uids": uids,
           "prompts": [row for p in parts for row in p["prompts"]],
           "new_rows": sum(p["new_rows"] for p in parts), "replayed": 0,
           "timing": {k: sum(p["timing"].get(k, 0.0) for p in parts) for k in parts[0]["timing"]}}
    for key in _ROW_TENSORS:
        out[key] = torch.cat([p[key] for p in parts]) if parts[0].get(key) is not None else None
    return out


def take_rows(rollout: dict[str, Any], rows: Sequence[int]) -> dict[str, Any]:
    """The rollout restricted to `rows` (new rows only: dynamic sampling runs without replay)."""
    index = torch.as_tensor(list(rows), dtype=torch.long)
    out = {**rollout, "batch": select(rollout["batch"], index), "uids": [rollout["uids"][i] for i in rows],
           "prompts": [rollout["prompts"][i] for i in rows], "new_rows": len(rows)}
    for key in _ROW_TENSORS:
        if rollout.get(key) is not None:
            out[key] = rollout[key][index]
    return out


def informative_rows(rollout: dict[str, Any], num_groups: int) -> tuple[list[int], int]:
    """DAPO dynamic sampling: `(rows, informative groups)` for a batch of `num_groups` prompts, taking
    groups whose scores differ first (in generation order), then, if there are too few of those,
    groups that all tied (they add no policy-gradient signal under a group estimator, but keep the
    batch its configured size)."""
    signal = group_has_signal(rollout["scores"], rollout["uids"]).tolist()
    groups: dict[Any, list[int]] = {}
    for row, uid in enumerate(rollout["uids"]):
        groups.setdefault(uid, []).append(row)
    good = [rows for rows in groups.values() if signal[rows[0]]]
    rest = [rows for rows in groups.values() if not signal[rows[0]]]
    chosen = (good + rest)[:num_groups]
    return [row for rows in chosen for row in rows], min(len(good), num_groups)


def advantages(algo: AlgorithmConfig, rewards: torch.Tensor, response_mask: torch.Tensor, keep: torch.Tensor,
               rollout: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """`(advantages, returns)` of `algo.adv_estimator`, each `(batch, response_len)`.

    `rewards` are the token-level rewards (score on the last token, minus the KL penalty when it is
    in the reward); `keep` `(batch,)` is False for rows the reward filter dropped: GAE whitens over
    the kept rows only, the critic-free estimators zero the dropped rows after."""
    name, uids = algo.adv_estimator, rollout["uids"]
    if name == "gae":
        return compute_gae(rewards, rollout["values"], response_mask * keep[:, None], algo.gamma, algo.lam)
    if name == "grpo":
        adv, ret = compute_grpo_advantages(rewards, response_mask, uids, norm_by_std=algo.norm_adv_by_std_in_grpo)
    elif name == "rloo":
        adv, ret = compute_rloo_advantages(rewards, response_mask, uids)
    elif name == "reinforce_plus_plus":
        adv, ret = compute_reinforce_plus_plus_advantages(rewards, response_mask, algo.gamma)
    elif name == "reinforce_plus_plus_baseline":
        adv, ret = compute_reinforce_plus_plus_baseline_advantages(rewards, response_mask, uids)
    elif name == "remax":
        adv, ret = compute_remax_advantages(rewards, rollout["baselines"].to(rewards.dtype), response_mask)
    else:
        raise ValueError(f"unknown adv_estimator {name!r}")
    return adv * keep[:, None], ret * keep[:, None]


def step_advantages(cfg: PPOConfig, rollout: dict[str, Any], kl_ctrl: AdaptiveKLController | FixedKLController,
                    replay: ReplayBuffer, *, filter_seed: int, use_critic: bool) -> dict[str, Any]:
    """Scores on the last response token, PF-PPO filtering (ties broken by `filter_seed`; kept rows
    go to `replay`), the KL penalty in the reward (and the `kl_ctrl` update), then the advantages of
    `algorithm.adv_estimator`."""
    start = time.perf_counter()
    batch, scores, values = rollout["batch"], rollout["scores"], rollout["values"]
    mask = batch["response_mask"]
    lengths = response_extent(batch)
    token_scores = torch.zeros(mask.shape, dtype=torch.float32)
    token_scores[torch.arange(len(scores)), last_index(mask)] = scores
    if "episode_turn_rewards" in batch:  # multi-turn: each turn's reward on its last sampled token
        token_scores = token_scores + batch["episode_turn_rewards"].float()
    reverse_kl = None
    if rollout.get("teacher") is not None:  # on-policy distillation: the teacher's reward on every token
        d = cfg.distill
        token_scores, reverse_kl = reverse_kl_rewards(token_scores, rollout["old"], rollout["teacher"], mask,
                                                      kl_coef=d.reverse_kl_coef, task_weight=d.task_reward_weight)
    new_rows = rollout["new_rows"]
    keep = torch.ones(len(scores), dtype=torch.bool)
    rf = cfg.guardrails.reward_filter
    if rf.enable:  # random tie-breaks from (seed, step): a resumed or retried step filters the same
        generator = torch.Generator().manual_seed(filter_seed)
        keep[:new_rows] = reward_filter_mask(scores[:new_rows], rollout["uids"][:new_rows], rf.mode, generator)
    failed = ppo_episodes.failed_rows(batch)
    if failed is not None and bool(failed.any()):
        # A failed episode trains nothing and is no group's baseline: alone in a group of its own.
        keep &= ~failed
        rollout = {**rollout, "uids": [("failed", i) if bad else uid
                                       for i, (uid, bad) in enumerate(zip(rollout["uids"], failed.tolist()))]}
    loss_mask = mask * keep[:, None]
    # On-policy there are no old log-probs yet: the driver fills the KL in from the update's.
    kl = None if rollout["old"] is None else kl_penalty(rollout["old"], rollout["ref"], cfg.algorithm.kl_penalty)
    current_kl = None if kl is None else float(masked_mean(kl, mask, dim=-1).mean())
    beta = kl_ctrl.value
    if cfg.algorithm.use_kl_in_reward:
        rewards = apply_kl_in_reward(token_scores, kl, beta, mask)
        kl_ctrl.update(current_kl, n_steps=len(scores))
    else:
        rewards = token_scores
    adv, returns = advantages(cfg.algorithm, rewards, mask, keep, rollout)
    raw_advantages = returns - values if use_critic else adv
    if rf.enable and rf.replay_buffer_size:
        replay.push([{"prompt": rollout["prompts"][i].prompt_ids,
                      "response": batch["responses"][i, :int(lengths[i])].tolist(),
                      "score": float(scores[i])} for i in range(new_rows) if keep[i]])
    return {"rewards": rewards, "advantages": adv, "returns": returns, "raw_advantages": raw_advantages,
            "keep": keep, "loss_mask": loss_mask, "current_kl": current_kl, "beta": beta,
            "reverse_kl": reverse_kl, "seconds": time.perf_counter() - start}



def step_metrics(cfg: PPOConfig, rollout: dict[str, Any], adv: dict[str, Any], updates: dict[str, list[Any]], *,
                 guard_kl: float, rollbacks: int) -> dict[str, float]:
    """A PPO step's metrics, VERL names (see docs/engine-contract.md), from the rollout, the
    advantages (`step_advantages`) and the roles' update results (`{"actor": [...], "critic": [...]}`)."""
    sums = MetricSums()
    for role in ("actor", "critic"):
        for result in updates[role]:
            sums.merge(result["metrics"])
    metrics = sums.means()
    metrics["perf/model_state_bytes_per_worker"] = sum(  # a colocated worker holds both roles
        metrics.get(f"perf/{r}_state_bytes_per_worker", 0.0) for r in ("actor", "critic"))
    batch, scores, loss_mask = rollout["batch"], rollout["scores"], adv["loss_mask"]
    new = slice(0, rollout["new_rows"])
    lengths = response_extent(batch)
    resp_len = lengths[new].float()
    metrics.update({
        "critic/score/mean": float(scores[new].mean()),
        "critic/score/max": float(scores[new].max()),
        "critic/score/min": float(scores[new].min()),
        "critic/rewards/mean": float((adv["rewards"] * batch["response_mask"]).sum(-1)[new].mean()),
        "critic/advantages/mean": float(masked_mean(adv["advantages"], loss_mask)),
        "critic/advantages/var": _safe_var(adv["raw_advantages"], loss_mask),
        "critic/returns/mean": float(masked_mean(adv["returns"], loss_mask)),
        "actor/reward_kl_penalty": adv["current_kl"],
        "actor/reward_kl_penalty_coeff": float(adv["beta"]),
        "guardrails/kl": guard_kl,
        "guardrails/rollbacks": float(rollbacks),
        "response_length/mean": float(resp_len.mean()),
        "response_length/max": float(resp_len.max()),
        "response_length/min": float(resp_len.min()),
        "response_length/clip_ratio": float((resp_len >= cfg.data.max_response_length).float().mean()),
        "prompt_length/mean": float(batch["prompt_lens"][new].float().mean()),
        "perf/total_num_tokens": float(lengths.sum() + batch["prompt_lens"].sum()),
        # every row the update trains on, replayed ones too (tokens the policy sampled)
        "train/response_tokens": float(batch["response_mask"].sum()),
        **rollout["timing"],
        "timing_s/adv": adv["seconds"],
    })
    metrics.update(ppo_episodes.metrics(batch, new))
    if rollout["values"] is not None:  # a critic
        metrics["critic/values/mean"] = float(masked_mean(rollout["values"], loss_mask))
        metrics["critic/vf_explained_var"] = explained_variance(rollout["values"], adv["returns"], loss_mask)
        metrics["timing_s/update_critic"] = max(u["time_s"] for u in updates["critic"])
    if updates["actor"]:
        metrics["timing_s/update_actor"] = max(u["time_s"] for u in updates["actor"])
    if cfg.guardrails.reward_filter.enable:
        metrics["reward_filter/kept_ratio"] = float(adv["keep"][new].float().mean())
        metrics["reward_filter/replayed"] = float(rollout["replayed"])
    if rollout["overlong"] is not None:
        metrics["reward/overlong_penalty/mean"] = float(rollout["overlong"].mean())
    if rollout["baselines"] is not None:
        metrics["critic/score_baseline/mean"] = float(rollout["baselines"].mean())
    if adv.get("reverse_kl") is not None:
        mask = batch["response_mask"][new]
        metrics["distill/reverse_kl/mean"] = float(masked_mean(adv["reverse_kl"][new], mask))
        metrics["distill/teacher_logprob/mean"] = float(masked_mean(rollout["teacher"][new].float(), mask))
    return metrics


def _safe_var(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float(masked_var(x, mask)) if float(mask.sum()) >= 2 else math.nan
