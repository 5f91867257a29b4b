"""Multi-turn episodes, token in, token out (issue: agentic RL).

An episode starts from a prompt's token ids; each turn the policy generates (all live episodes of a
batch at once), the turn's text goes to the episode's environment (`engine.environments`), and the
environment's new messages are rendered alone with the chat template's incremental form and their
tokens appended. The ids the model was fed at every turn are therefore always a prefix of the ids that
are trained: nothing is re-tokenized.

The result per episode is everything after the prompt (assistant and observation tokens) with a loss
mask: 1 on tokens the policy sampled, 0 on tokens the environment wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.environments.base import Environment
from engine.rollout.sampling import SamplingParams


@dataclass(frozen=True)
class MultiTurn:
    """The loop's limits (`rollout.multi_turn`, engine side)."""

    max_turns: int = 4
    """Assistant turns per episode; an episode still going after them is truncated."""
    max_tool_calls: int = 8
    """Tool calls per episode; past them the episode is truncated."""
    max_episode_tokens: int = 0
    """Tokens after the prompt (assistant and observation); 0: `data.max_response_length`."""
    tool_format: str = "hermes"
    """How tool calls are written in the assistant text (`<tool_call>{json}</tool_call>`)."""


@dataclass
class Episode:
    response_ids: list[int]
    """Every token after the prompt: assistant turns and the environment's messages, in order."""
    loss_mask: list[int]
    """1 on tokens the policy sampled (the loss and value targets read them), 0 on the environment's."""
    sampling_log_probs: list[float]
    """The sampler's log-prob per token of `response_ids` (0.0 on the environment's tokens)."""
    turn_ends: list[int]
    """Index in `response_ids` of each assistant turn's last token."""
    turn_rewards: list[float]
    """Per assistant turn, the environment's reward for it (0.0 when it gave none)."""
    final_reward: float | None = None
    """The environment's outcome reward; None: the job's reward function scores `final_text`."""
    final_text: str = ""
    """The last assistant turn's text."""
    final_span: tuple[int, int] = (0, 0)
    """`[start, end)` of the last assistant turn in `response_ids`."""
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    truncated: bool = False
    """Cut by `max_turns`, `max_tool_calls` or the token budget before the environment said done."""
    failed: str | None = None
    """Why the environment failed (`EnvironmentFailure`), else None; a failed episode trains nothing."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The transcript (assistant turns, tool calls and results) for the console's samples."""
    env_seconds: float = 0.0


def run_episodes(generate: Any, tokenizer: Any, prompts: Sequence[Sequence[int]],
                 conversations: Sequence[list[dict[str, Any]]], environments: Sequence[Environment],
                 rows: Sequence[Mapping[str, Any]], seeds: Sequence[int], params: SamplingParams,
                 limits: MultiTurn, max_tokens: int) -> list[Episode]:
    """Run one episode per prompt to its end.

    Args:
        generate: the rollout backend's `generate(prompts, seeds, params)` (token ids in, one response's
            ids out per prompt); its `last_log_probs` after each call gives the sampled tokens' log-probs.
        tokenizer: the policy's tokenizer (its chat template renders the environment's messages).
        prompts: each episode's prompt token ids (already rendered with the generation prompt).
        conversations: each prompt as chat messages (what the incremental rendering continues).
        environments: one fresh environment per episode (`engine.environments.building.make_environment`).
        rows: each prompt's row (what `Environment.reset` reads).
        seeds: per episode; turn `t` samples with a seed derived from it and `t`.
        params: sampling parameters; `max_new_tokens` is cut to what is left of `max_tokens` each turn.
        limits: `rollout.multi_turn`.
        max_tokens: tokens after the prompt an episode may hold (`data.max_response_length`, or less).
    """
    raise NotImplementedError  # written by the episodes helper
