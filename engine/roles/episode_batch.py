"""Multi-turn episodes as rollout rows (`rollout.multi_turn`): the actor runs one episode per prompt row
(`engine.rollout.episodes.run_episodes`, an environment per row from its spec) and lays them out as a
`Batch` whose `response_mask` is 1 only on the tokens the policy sampled, plus what the reward role,
the advantages and the metrics read of an episode (all per-row tensors, so `select`/`concat` and the
roles' micro-batching carry them like any other column):

    episode_final_reward  (batch,)   the environment's outcome reward, NaN when it gave none
    episode_turn_rewards  (batch, R) each turn's reward on that turn's last sampled token
    episode_final_span    (batch, 2) [start, end) of the last assistant turn in `responses`
    episode_stats         (batch, 6) turns, tool calls, tool errors, truncated, failed, env seconds
    episode_transcript    (batch, TRANSCRIPT_BYTES) uint8: the transcript and per-turn rewards as
                          JSON (each message cut), for the `job.samples` event

A tensor for the transcript because a batch is a dict of tensors that travels by object reference to
every role; the transcript is small and only the driver decodes it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from engine.config import PPOConfig
from engine.environments.building import EnvironmentContext, make_environment
from engine.errors import DataError
from engine.rollout.episodes import Episode, MultiTurn, run_episodes
from engine.rollout.sampling import SamplingParams

STATS = ("turns", "tool_calls", "tool_errors", "truncated", "failed", "env_seconds")
TRANSCRIPT_BYTES = 8192
MESSAGE_CHARS = 600
"""Per message of a transcript (the console shows samples, not whole logs)."""
FAILURE_CHARS = 300
"""Of why an episode's environment failed (`Episode.failed`: the environment's own words, or only the
exception's type for a bug in one), kept for the job's error and the sample."""


def limits(cfg: PPOConfig) -> tuple[MultiTurn, int]:
    """The episode loop's limits and its token budget after the prompt."""
    mt = cfg.rollout.multi_turn
    budget = mt.max_episode_tokens or cfg.data.max_response_length
    return MultiTurn(max_turns=mt.max_turns, max_tool_calls=mt.max_tool_calls, max_episode_tokens=budget,
                     tool_format=mt.tool_format), budget


def conversation(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A row's prompt as chat messages (what the loop's incremental rendering continues)."""
    conv = meta.get("conversation") or meta.get("prompt", "")
    return [{"role": "user", "content": conv}] if isinstance(conv, str) else [dict(m) for m in conv]


def run(generate: Any, tokenizer: Any, prompts: Sequence[Sequence[int]], seeds: Sequence[int],
        params: SamplingParams, meta: Sequence[Mapping[str, Any]], cfg: PPOConfig,
        context: EnvironmentContext) -> list[Episode]:
    """One episode per prompt, each against a fresh environment built from its row's spec."""
    environments = [make_environment(m["environment"], context) for m in meta]
    loop, budget = limits(cfg)
    per_turn = cfg.rollout.multi_turn.max_tokens_per_turn
    if per_turn:  # the loop cuts each turn to what is left of the budget, and to this
        params = dataclasses.replace(params, max_new_tokens=min(params.max_new_tokens, per_turn))
    return run_episodes(generate, tokenizer, prompts, [conversation(m) for m in meta], environments, meta,
                        seeds, params, loop, budget)


def check_prompt_width(prompts: Sequence[Sequence[int]], width: int) -> None:
    """An episode's prompt, its environment's first observation included, must fit the batch's prompt width."""
    longest = max((len(p) for p in prompts), default=0)
    if longest > width:
        raise DataError(f"an episode's prompt with its environment's first observation has {longest} tokens, more "
                        f"than data.max_prompt_length={width}: raise it", param="data.max_prompt_length")


def _transcript(episode: Episode) -> bytes:
    messages = [{**m, "content": str(m.get("content") or "")[:MESSAGE_CHARS]} for m in episode.messages]
    while True:  # drop messages from the middle until it fits (the first and last stay)
        data = json.dumps({"messages": messages, "turn_rewards": list(episode.turn_rewards),
                           **({"failed": episode.failed[:FAILURE_CHARS]} if episode.failed else {})}).encode()
        if len(data) <= TRANSCRIPT_BYTES or len(messages) <= 2:
            return data[:TRANSCRIPT_BYTES]
        del messages[len(messages) // 2]


def tensors(episodes: Sequence[Episode], width: int) -> dict[str, torch.Tensor]:
    """The per-row episode columns of the batch (see the module docstring)."""
    n = len(episodes)
    final = torch.full((n,), float("nan"), dtype=torch.float32)
    turn_rewards = torch.zeros(n, width, dtype=torch.float32)
    span = torch.zeros(n, 2, dtype=torch.long)
    stats = torch.zeros(n, len(STATS), dtype=torch.float32)
    transcript = torch.zeros(n, TRANSCRIPT_BYTES, dtype=torch.uint8)
    for i, e in enumerate(episodes):
        if e.final_reward is not None:
            final[i] = float(e.final_reward)
        if e.failed is None:  # a failed episode trains nothing: no reward lands in it
            for end, reward in zip(e.turn_ends, e.turn_rewards):
                turn_rewards[i, end] += float(reward)
        span[i] = torch.as_tensor(e.final_span, dtype=torch.long)
        stats[i] = torch.as_tensor([e.turns, e.tool_calls, e.tool_errors, float(e.truncated),
                                    float(e.failed is not None), e.env_seconds], dtype=torch.float32)
        data = _transcript(e)
        transcript[i, :len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return {"episode_final_reward": final, "episode_turn_rewards": turn_rewards, "episode_final_span": span,
            "episode_stats": stats, "episode_transcript": transcript}


def stat(batch: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
    """`(batch,)` float column `name` of `STATS`."""
    return batch["episode_stats"][:, STATS.index(name)]


def transcript(batch: Mapping[str, torch.Tensor], row: int) -> dict[str, Any]:
    """`{messages, turn_rewards}` of an episode row, and `failed` (why) when its environment failed."""
    data = bytes(batch["episode_transcript"][row].tolist()).rstrip(b"\0")
    try:
        return json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError):  # cut at the byte limit
        return {"messages": [], "turn_rewards": []}
