"""A few of a PPO step's rollouts, decoded, for the `job.samples` event: what the policy wrote and
what it earned, the way VERL and TRL users look at W&B tables. Size-capped: the event log keeps them."""

from __future__ import annotations

from typing import Any

from engine.methods import ppo_episodes
from engine.runtime.reporting import Reporter

SAMPLES_PER_STEP = 4
MAX_CHARS = 600
"""Per prompt and per response: the tail of a prompt (the question), the head of a response."""


def rows(tokenizer: Any, rollout: dict[str, Any], count: int = SAMPLES_PER_STEP) -> list[dict[str, Any]]:
    """The first `count` freshly sampled rows of a rollout as {prompt, response, reward}; an episode's
    also carry `messages` (the transcript), `turn_rewards`, `turns` and `tool_calls`. The response is
    what the policy sampled (an episode's assistant turns, joined)."""
    batch, scores, prompts = rollout["batch"], rollout["scores"], rollout["prompts"]
    out = []
    for i in range(min(count, rollout["new_rows"], len(prompts))):
        ids = batch["responses"][i][batch["response_mask"][i].bool()].tolist()
        prompt = prompts[i].text
        row = {"prompt": prompt[-MAX_CHARS:], "response": tokenizer.decode(ids, skip_special_tokens=True)[:MAX_CHARS],
               "reward": float(scores[i])}
        if "episode_stats" in batch:  # a multi-turn episode: its transcript, per-turn rewards and counts
            row.update(ppo_episodes.sample_fields(batch, i))
        out.append(row)
    return out


def report(reporter: Reporter, tokenizer: Any, step: int, rollout: dict[str, Any]) -> None:
    """`reporter.samples(step, rows)`; a reporter without it (an older one) is skipped."""
    samples = getattr(reporter, "samples", None)
    if samples is not None:
        samples(step, rows(tokenizer, rollout))
