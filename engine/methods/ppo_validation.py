"""Validation of the PPO policy and what is read from it: greedy responses to the validation prompts,
scored (`validate`); the overfit gap between training and validation reward at the end (`overfit`);
and the collapse guardrail on the step's entropy and the validation responses (`collapse`).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from engine.config import PPOConfig
from engine.data import PromptExample
from engine.guardrails import Verdict, distinct_ratio, judge_collapse, overfit_gap
from engine.methods import ppo_episodes
from engine.methods.ppo_dispatch import RoleDispatch, prompt_meta
from engine.roles.batch import concat, response_extent
from engine.rollout.sampling import row_seed
from engine.runtime.reporting import Reporter

VAL_STREAM = 0x7FFF_FFFF
"""Batch number used in validation row seeds (training batches count from 0)."""


def validate(dispatch: RoleDispatch, cfg: PPOConfig, val: list[PromptExample], deadline: float, *, seed: int,
             step: int) -> tuple[dict[str, float], list[list[int]]]:
    """Greedy (`rollout.val_temperature`) responses to the validation prompts `val`, scored.

    Returns the metrics and each prompt's response tokens (the collapse guardrail reads them).
    """
    start = time.perf_counter()
    ppo_episodes.check_prompts(cfg, val, "validation file")
    size = cfg.data.val_batch_size or len(val)
    refs: dict[str, list[Any]] = {"scores": [], "batch": []}
    orders = []
    for lo in range(0, len(val), size):
        chunk = val[lo:lo + size]
        seeds = [row_seed(seed, VAL_STREAM, lo + i) for i in range(len(chunk))]
        chunk_refs, order = dispatch.submit_rollout([p.prompt_ids for p in chunk], seeds,
                                                    [prompt_meta(p) for p in chunk], validate=True)
        orders.append([lo + i for i in order])
        refs["scores"] += chunk_refs["scores"]
        refs["batch"] += chunk_refs["batch"]
    out = dispatch.gather(refs, deadline, "validation", step)
    scores = torch.cat([o["scores"] for o in out["scores"]])
    order = torch.tensor([i for o in orders for i in o])
    by_row = torch.empty_like(scores)
    by_row[order] = scores
    batch = concat(out["batch"])
    lengths = response_extent(batch).tolist()  # an episode's holes too
    responses: list[list[int]] = [[] for _ in val]
    for j, row in enumerate(order.tolist()):
        responses[row] = batch["responses"][j, :int(lengths[j])].tolist()
    metrics = {"val/reward/mean": float(by_row.mean()), "val/distinct_responses": distinct_ratio(responses),
               "timing_s/testing": time.perf_counter() - start}
    sources = sorted({p.data_source for p in val if p.data_source})
    if len(sources) > 1:
        for source in sources:
            idx = [i for i, p in enumerate(val) if p.data_source == source]
            metrics[f"val/reward/{source}"] = float(by_row[idx].mean())
    return metrics, responses


def overfit(reporter: Reporter, metrics: dict[str, float], train_scores: list[float], train_spreads: list[float],
            steps_per_epoch: int) -> dict[str, float]:
    """`val/overfit_gap` (training reward over the last epoch's steps - validation reward) and an
    `overfit` warning above max(0.05, half the training scores' spread); nothing without validation."""
    if "val/reward/mean" not in metrics or not train_scores:
        return {}
    recent = train_scores[-steps_per_epoch:]
    train_reward = sum(recent) / len(recent)
    spreads = train_spreads[-steps_per_epoch:]
    spread = sum(spreads) / len(spreads) if spreads else 0.0
    gap, margin, overfitting = overfit_gap(train_reward, metrics["val/reward/mean"], spread)
    if overfitting:
        reporter.warning("overfit", f"validation reward trails training reward by {gap:.3f} "
                         f"(> {margin:.3f}: max(0.05, half the training scores' spread {spread:.3f}))",
                         {"train_reward": train_reward, "val_reward": metrics["val/reward/mean"],
                          "gap": gap, "margin": margin, "spread": spread})
    return {"val/overfit_gap": gap, "train/reward/mean": train_reward}


def collapse(reporter: Reporter, cfg: PPOConfig, tokenizer: Any, val: list[PromptExample],
             val_responses: list[list[int]] | None, step: int, entropy: float | None,
             metrics: dict[str, float]) -> Verdict:
    """Judge the step's generations (`judge_collapse`); a `warn` verdict is reported here with a
    few decoded offending validation responses, a `rollback` one is left to the caller."""
    responses = val_responses if "val/reward/mean" in metrics else None
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    verdict = judge_collapse(entropy, responses, cfg.guardrails, eos)
    if verdict.action == "ok":
        return verdict
    rows = verdict.evidence.get("sample_rows", [])
    samples = [{"prompt": val[i].text[-200:],
                "response": tokenizer.decode(responses[i], skip_special_tokens=False)[:200]}
               for i in rows] if responses is not None else []
    verdict = Verdict(verdict.action, verdict.reason, {**verdict.evidence, "samples": samples})
    if verdict.action == "warn" or step == 0:
        reporter.warning("collapse", f"step {step}: {verdict.reason}", {"step": step, **verdict.evidence})
    return verdict
