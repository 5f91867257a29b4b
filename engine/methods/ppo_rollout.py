"""The rollout phase of a PPO step: snapshot the trained roles, generate `rollout.n` samples per prompt
and, in the same submission, score them and compute the old and reference log-probs and the values;
replayed samples are re-scored beside them, and ReMax's greedy baseline is generated with them.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.config import PPOConfig
from engine.data import PromptExample
from engine.methods import ppo_episodes
from engine.methods import ppo_experience as experience
from engine.methods.ppo_dispatch import RoleDispatch, prompt_meta
from engine.rewards.code_tests import reward_metrics
from engine.roles.batch import build_batch, concat, response_extent, select
from engine.rollout.sampling import row_seed


def collect(dispatch: RoleDispatch, cfg: PPOConfig, prompts: list[PromptExample], deadline: float, *,
            step: int, seed: int, batch_index: int, replayed: list[dict[str, Any]], pad_id: int,
            snapshot: bool = True) -> dict[str, Any]:
    """Snapshot the last good state (unless `snapshot` is False: a further generation batch of
    step `step`), then generate `rollout.n` samples per prompt and compute old log-probs,
    reference log-probs, values, scores (shaped by `reward.overlong_buffer`) and, for ReMax, the
    greedy baseline's scores: one submission, one gather.

    Returns the batch in row order (prompt-major) with `old`, `ref`, `values` (None without a
    critic), `teacher` (a distillation teacher's log-probs, else None), `scores`, `baselines` (ReMax, else None), `overlong` (the penalties, or None),
    `uids` (prompt index per row), `prompts`, `new_rows` (rows sampled now; replayed rows follow),
    `replayed` and the workers' timings.

    `replayed`: samples taken from the replay buffer (`engine.guardrails.ReplayBuffer`), re-scored
    beside the new ones; `seed`: the job's (row seeds count from it and `batch_index`).
    """
    ppo_episodes.check_prompts(cfg, prompts, "training file")
    roles, use_critic = dispatch.roles, dispatch.use_critic
    trained = [roles["actor"]] + ([roles["critic"]] if use_critic else [])
    snapshots = [r for g in trained for r in g.submit_all("snapshot")] if snapshot else []
    rows = [p for p in prompts for _ in range(cfg.rollout.n)]
    uids = [i for i in range(len(prompts)) for _ in range(cfg.rollout.n)]
    seeds = [row_seed(seed, batch_index, i) for i in range(len(rows))]
    extra = build_batch([r["prompt"] for r in replayed], [r["response"] for r in replayed],
                        prompt_width=cfg.data.max_prompt_length, response_width=cfg.data.max_response_length,
                        pad_id=pad_id) if replayed else None
    refs, order = dispatch.submit_rollout([p.prompt_ids for p in rows], seeds, [prompt_meta(p) for p in rows],
                                          validate=False, extra_batch=extra)
    baseline_order: list[int] = []
    if cfg.algorithm.adv_estimator == "remax":  # one greedy response per prompt: its score is the baseline
        greedy, baseline_order = dispatch.submit_rollout(
            [p.prompt_ids for p in prompts], seeds[:len(prompts)], [prompt_meta(p) for p in prompts],
            validate=True, greedy=True)
        refs["baseline_scores"], refs["baseline_gen"] = greedy["scores"], greedy["gen"]
        refs["baseline_batch"] = greedy["batch"]
    out = dispatch.gather({**refs, "snapshot": snapshots}, deadline, "rollout", step)

    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    result: dict[str, Any] = {
        "batch": select(concat(out["batch"]), inverse),
        "old": torch.cat([o["log_probs"] for o in out["old"]])[inverse] if out["old"] else None,
        "ref": torch.cat([o["log_probs"] for o in out["ref"]])[inverse],
        "values": torch.cat([o["values"] for o in out["values"]])[inverse] if use_critic else None,
        "scores": torch.cat([o["scores"] for o in out["scores"]])[inverse],
        "teacher": torch.cat([o["log_probs"] for o in out["teacher"]])[inverse] if out["teacher"] else None,
        "baselines": None, "overlong": None,
        "uids": uids, "prompts": rows, "new_rows": len(rows), "replayed": len(replayed),
        "timing": {
            "timing_s/gen": max(out["gen"]),
            "timing_s/snapshot": max((o["time_s"] for o in out["snapshot"]), default=0.0),
            **({"timing_s/old_log_prob": max(o["time_s"] for o in out["old"])} if out["old"] else {}),
            "timing_s/ref": max(o["time_s"] for o in out["ref"]),
            "timing_s/reward": max(o["time_s"] for o in out["scores"]),
            **({"timing_s/values": max(o["time_s"] for o in out["values"])} if use_critic else {}),
            **({"timing_s/teacher": max(o["time_s"] for o in out["teacher"])} if out["teacher"] else {}),
            **reward_metrics(out["scores"]),  # code_tests' reward/timeouts, reward/errors: into the step's metrics
        },
    }
    if replayed:  # replayed rows: fresh log-probs and values, the scores they earned
        sampled = result["batch"]
        extra["policy_version"] = sampled["policy_version"][:1].expand(len(replayed), -1).clone()
        if "rollout_log_probs" in sampled:  # re-scored now: the trainer's own log-probs, no gap
            extra["rollout_log_probs"] = out["extra_old"][0]["log_probs"].float()
        result["batch"] = concat([result["batch"], extra])
        result["old"] = torch.cat([result["old"], out["extra_old"][0]["log_probs"]])
        result["ref"] = torch.cat([result["ref"], out["extra_ref"][0]["log_probs"]])
        result["scores"] = torch.cat([result["scores"], torch.tensor([r["score"] for r in replayed])])
        if use_critic:
            result["values"] = torch.cat([result["values"], out["extra_values"][0]["values"]])
        result["uids"] = uids + [-1 - j for j in range(len(replayed))]
    new = slice(0, len(rows))
    ppo_episodes.check_failed(cfg, result["batch"], len(rows), step)
    lengths = response_extent(result["batch"])[new]
    result["scores"][new], result["overlong"] = experience.shape_scores(result["scores"][new], lengths, cfg)
    if baseline_order:
        # The baseline is shaped as the samples are (DAPO's overlong penalty on its own length).
        greedy_lengths = response_extent(concat(out["baseline_batch"]))
        greedy_scores, _ = experience.shape_scores(
            torch.cat([o["scores"] for o in out["baseline_scores"]]).float(), greedy_lengths, cfg)
        per_prompt = torch.empty(len(prompts))
        per_prompt[torch.tensor(baseline_order)] = greedy_scores
        result["baselines"] = per_prompt[torch.tensor(uids)]
        result["timing"]["timing_s/gen_baseline"] = max(out["baseline_gen"])
    return result
