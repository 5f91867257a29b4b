"""Recorded agent trajectories as training samples (bring your own agent, docs/trajectories.md).

A trajectory is the token-level record of an agent's inference calls made under one
`trajectory_id` (each call's prompt ids, completion ids and the completion's log-probs, in order)
plus the reward its client posted. It becomes samples in `build_batch`'s layout:

- the first call's prompt ids are the sample's prompt; its completion ids are sampled tokens
  (loss mask 1, behaviour log-probs = the recorded ones);
- when the next call's prompt ids start with everything so far (prompt + response), the tokens
  after that prefix are observations (tool results, the user's next turn, the chat template's
  markup: loss mask 0, log-prob 0) and its completion follows them as sampled tokens;
- when they do not (the agent rewrote or truncated its history, or the chat template re-tokenized
  an earlier turn differently), the sample ends there and the call starts a new sample from its own
  prompt. Every sample of a trajectory earns the trajectory's reward. Another choice of the same
  call (`n` > 1) starts a sample of its own the same way.

Samples that do not fit the job's widths (`data.max_prompt_length`, `data.max_response_length`) are
dropped and counted, never cut: a cut sample would train on tokens in another context than they
were sampled in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrajectorySample:
    """One sample cut from a trajectory: a prompt and a response whose tokens are either sampled
    (mask 1, with their behaviour log-probs) or observed (mask 0, log-prob 0)."""

    trajectory_id: str
    group: str
    """The client's `group_id`, or the trajectory's own id when it gave none (a group of one)."""
    reward: float
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    rollout_log_probs: list[float] = field(default_factory=list)

    def extend(self, observed: Sequence[int], sampled: Sequence[int], log_probs: Sequence[float]) -> None:
        self.response_ids += [*observed, *sampled]
        self.loss_mask += [0] * len(observed) + [1] * len(sampled)
        self.rollout_log_probs += [0.0] * len(observed) + [float(x) for x in log_probs]


def trajectory_samples(trajectory: dict[str, Any]) -> list[TrajectorySample]:
    """A trajectory row (`{trajectory_id, group_id, reward, calls: [{prompt_token_ids,
    completion_token_ids, logprobs}]}`, the calls in order) as samples; see the module docstring."""
    tid = str(trajectory["trajectory_id"])
    group = str(trajectory.get("group_id") or f"trajectory:{tid}")
    reward = float(trajectory["reward"])
    samples: list[TrajectorySample] = []
    current: TrajectorySample | None = None
    for call in trajectory["calls"]:
        prompt, completion = list(call["prompt_token_ids"]), list(call["completion_token_ids"])
        log_probs = list(call["logprobs"])
        if len(log_probs) != len(completion):
            raise ValueError(f"trajectory {tid!r}: a call has {len(completion)} completion tokens but "
                             f"{len(log_probs)} log-probs")
        if current is not None:
            so_far = current.prompt_ids + current.response_ids
            if len(prompt) >= len(so_far) and prompt[:len(so_far)] == so_far:
                current.extend(prompt[len(so_far):], completion, log_probs)
                continue
            samples.append(current)
        current = TrajectorySample(tid, group, reward, prompt)
        current.extend((), completion, log_probs)
    if current is not None:
        samples.append(current)
    return samples


def load_samples(rows: Iterable[dict[str, Any]], *, prompt_width: int, response_width: int,
                 ) -> tuple[list[TrajectorySample], int]:
    """Every trajectory's samples, in order, and how many were dropped for not fitting the widths
    (or for holding no sampled token: nothing to train on)."""
    kept: list[TrajectorySample] = []
    dropped = 0
    for row in rows:
        for sample in trajectory_samples(row):
            fits = 0 < len(sample.prompt_ids) <= prompt_width and len(sample.response_ids) <= response_width
            if fits and any(sample.loss_mask):
                kept.append(sample)
            else:
                dropped += 1
    return kept, dropped


def groups(samples: Sequence[TrajectorySample]) -> list[list[TrajectorySample]]:
    """Samples by group, groups in the order they first appear (a group's baseline is its members')."""
    by_group: dict[str, list[TrajectorySample]] = {}
    for sample in samples:
        by_group.setdefault(sample.group, []).append(sample)
    return list(by_group.values())
