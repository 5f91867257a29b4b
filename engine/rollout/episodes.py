"""Multi-turn episodes, token in, token out (issue: agentic RL).

An episode starts from a prompt's token ids; each turn the policy generates (all live episodes of a
batch at once), the turn's text goes to the episode's environment (`engine.environments`), and the
environment's new messages are rendered alone with the chat template's incremental form and their
tokens appended. The ids the model was fed at every turn are therefore always a prefix of the ids that
are trained: nothing is re-tokenized.

The result per episode is everything after the prompt (assistant and observation tokens) with a loss
mask: 1 on tokens the policy sampled, 0 on tokens the environment wrote.

Incremental rendering (`engine.rollout.chat_delta.ChatDelta`, as verl does with a base chat history):
the tokens appended after an assistant turn are what the chat template writes between that turn's last
sampled token and the next generation prompt, found by rendering a fixed base conversation that ends with
an assistant turn with and without the new messages and tokenizing only the difference
(`add_special_tokens=False`). The text the template writes after an assistant's content (the demo
template: `<|eos|>\n`; Qwen's: `<|im_end|>\n`) depends on how the turn ended:
- it ended with a sampled EOS: the rest of that text after the EOS token (`\n`) leads the delta;
- it was cut at its token budget without EOS: the whole end-of-turn text is appended first, as the
  environment's tokens (loss mask 0: the policy did not choose to stop), then the new messages.
An environment's first observation (messages `reset` returns) comes before any sampled token: the
prompt's own generation prompt is replaced by the observation's rendering (`Episode.prompt_ids`).

Sampling: each turn, every live episode of the batch generates in one `generate` call; turn 0 samples
with the episode's seed (a one-turn episode draws what a single-turn rollout would), turn `t` with
`row_seed(seed, t)`. Episodes end on the environment's `done`, or are cut (`Episode.truncated`) by
`max_turns`, by more than `max_tool_calls` calls, or when the token budget leaves no room for another
sampled token after the next observation; then the last assistant turn is the final one. The
environments of a batch answer concurrently (`ENV_THREADS` at once: a remote server's round trip, the
python tool's sandboxed process), each episode's calls in order.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from engine.environments.base import Environment, EnvironmentFailure, Step
from engine.environments.tool_calls import FORMATS, openai_tool_calls, parse_tool_calls
from engine.errors import ConfigError
from engine.rollout.chat_delta import ChatDelta
from engine.rollout.sampling import SamplingParams, row_seed

log = logging.getLogger(__name__)


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
    prompt_ids: list[int] = field(default_factory=list)
    """The prompt the episode was sampled from: the given one, or, when the environment's `reset` returned
    messages (a first observation), the conversation with them rendered after it (see the module doc)."""


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
    count = len(prompts)
    if not count == len(conversations) == len(environments) == len(rows) == len(seeds):
        raise ValueError("run_episodes needs one conversation, environment, row and seed per prompt")
    if limits.tool_format not in FORMATS:
        raise ConfigError(f"rollout.multi_turn.tool_format must be one of {', '.join(FORMATS)}",
                          param="rollout.multi_turn.tool_format")
    owner = getattr(generate, "__self__", generate)
    eos_ids = {int(e) for e in getattr(owner, "eos_token_ids", None) or ()}
    if tokenizer.eos_token_id is not None:
        eos_ids.add(int(tokenizer.eos_token_id))
    delta = ChatDelta(tokenizer, eos_ids)
    budget = min(max_tokens, limits.max_episode_tokens) if limits.max_episode_tokens > 0 else max_tokens
    runs = [_Run(i, list(prompts[i]), environments[i], seeds[i], budget) for i in range(count)]
    # Environments answer concurrently (a remote server's round trip, a sandboxed process's start-up):
    # each run's calls stay in order, and all rendering and bookkeeping happen on this thread.
    pool = ThreadPoolExecutor(max_workers=max(1, min(ENV_THREADS, count)), thread_name_prefix="episode-env")
    try:
        resets = list(pool.map(lambda run: run.call(run.env.reset, rows[run.index], list), runs))
        for run, messages in zip(runs, resets):
            run.start(messages, _chat(conversations[run.index]), delta)
        for turn in range(limits.max_turns):
            live = [run for run in runs if run.live]
            if not live:
                break
            caps = [min(params.max_new_tokens, run.room) for run in live]
            outputs = generate([run.ids for run in live], [_turn_seed(run.seed, turn) for run in live],
                               dataclasses.replace(params, max_new_tokens=max(caps)))
            log_probs = getattr(owner, "last_log_probs", None)
            texts = []
            for j, (run, cap) in enumerate(zip(live, caps)):
                sampled = list(outputs[j])[:cap]
                lps = list(log_probs[j])[:cap] if log_probs is not None else []
                texts.append(run.sampled(sampled, lps if len(lps) == len(sampled) else [0.0] * len(sampled),
                                         tokenizer, limits.tool_format))
            stepping = [(run, text) for run, text in zip(live, texts) if text is not None]
            steps = list(pool.map(lambda pair: pair[0].call(pair[0].env.step, pair[1], Step), stepping))
            for (run, _), step in zip(stepping, steps):
                run.stepped(step, delta, limits)
        for run in runs:
            if run.live:  # still going after max_turns
                run.stop(truncated=True)
    finally:
        list(pool.map(lambda run: run.close(), runs))
        pool.shutdown()
    return [run.finish() for run in runs]


ENV_THREADS = 16
"""Environments of one batch called at once, at most."""


def _turn_seed(seed: int, turn: int) -> int:
    return seed if turn == 0 else row_seed(seed, turn)


def _chat(conversation: Any) -> list[dict[str, Any]]:
    if isinstance(conversation, str):
        return [{"role": "user", "content": conversation}]
    return list(conversation or [])


class _Run:
    """One episode in progress: the ids fed so far, and its record."""

    def __init__(self, index: int, prompt: list[int], env: Environment, seed: int, budget: int) -> None:
        self.index, self.env, self.seed, self.budget = index, env, int(seed), budget
        self.ids = prompt
        self.episode = Episode(response_ids=[], loss_mask=[], sampling_log_probs=[], turn_ends=[], turn_rewards=[],
                               prompt_ids=prompt)
        self.live = True
        self.last_token = -1

    @property
    def room(self) -> int:
        return self.budget - len(self.episode.response_ids)

    def start(self, messages: list[dict[str, Any]] | None, conversation: list[dict[str, Any]],
              delta: ChatDelta) -> None:
        """After `reset`: its messages (a first observation) join the prompt."""
        if messages:
            self.ids = delta.prompt_with(self.ids, conversation, messages)
            self.episode.prompt_ids = self.ids
            self.episode.messages.extend(messages)
        if self.live and self.room <= 0:
            self.stop(truncated=True)

    def sampled(self, ids: list[int], log_probs: list[float], tokenizer: Any, tool_format: str) -> str | None:
        """Record a turn's sampled tokens; its text for the environment (None: nothing to step)."""
        episode = self.episode
        if not ids:  # a backend that returned nothing: nothing to score or continue from
            self.stop(truncated=True)
            return None
        start = len(episode.response_ids)
        self._append(ids, 1, log_probs)
        self.last_token = ids[-1]
        episode.turn_ends.append(len(episode.response_ids) - 1)
        episode.turn_rewards.append(0.0)
        episode.turns += 1
        text = tokenizer.decode(ids, skip_special_tokens=True)
        episode.final_text, episode.final_span = text, (start, len(episode.response_ids))
        message: dict[str, Any] = {"role": "assistant", "content": text}
        calls = openai_tool_calls(parse_tool_calls(text, tool_format))
        if calls:  # for reading the transcript; `content` is what was sampled, markup included
            message["tool_calls"] = calls
        episode.messages.append(message)
        return text

    def stepped(self, step: Step | None, delta: ChatDelta, limits: MultiTurn) -> None:
        """The environment's answer to the turn: end the episode, or append its messages' tokens."""
        episode = self.episode
        if step is None:  # the environment failed
            return
        episode.turn_rewards[-1] = float(step.reward) if step.reward is not None else 0.0
        episode.tool_calls += step.tool_calls
        episode.tool_errors += step.tool_errors
        if step.done:
            episode.final_reward = None if step.final_reward is None else float(step.final_reward)
            self.stop(truncated=False)
            return
        if episode.turns >= limits.max_turns or episode.tool_calls > limits.max_tool_calls:
            self.stop(truncated=True)
            return
        observation = delta.after_turn(self.last_token, step.messages)
        if len(observation) >= self.room:  # no room left for a single sampled token after it
            self.stop(truncated=True)
            return
        self._append(observation, 0, [0.0] * len(observation))
        episode.messages.extend(step.messages)

    def _append(self, ids: list[int], mask: int, log_probs: list[float]) -> None:
        self.episode.response_ids.extend(ids)
        self.episode.loss_mask.extend([mask] * len(ids))
        self.episode.sampling_log_probs.extend(float(x) for x in log_probs)
        self.ids = self.ids + ids

    def call(self, method: Any, argument: Any, answer_type: type) -> Any:
        """The environment's answer, timed; None when it failed (the episode is then over)."""
        began = time.perf_counter()
        try:
            answer = method(argument)
            if answer is None and answer_type is list:
                answer = []
            if not isinstance(answer, answer_type):
                raise EnvironmentFailure(f"the environment answered {type(answer).__name__}, not a "
                                         f"{answer_type.__name__}")
            return answer
        except EnvironmentFailure as e:
            self._fail(str(e) or "the environment failed")
        except Exception as e:  # an environment's bug fails its episode, not the batch
            log.warning("environment of episode %d raised", self.index, exc_info=True)
            self._fail(f"the environment raised {type(e).__name__}")
        finally:
            self.episode.env_seconds += time.perf_counter() - began
        return None

    def _fail(self, why: str) -> None:
        self.episode.failed = why[:500]
        self.live = False

    def stop(self, *, truncated: bool) -> None:
        self.episode.truncated = truncated
        self.live = False

    def close(self) -> None:
        began = time.perf_counter()
        try:
            self.env.close()
        except Exception:  # closing must reach every environment of the batch
            log.warning("closing the environment of episode %d failed", self.index, exc_info=True)
        finally:
            self.episode.env_seconds += time.perf_counter() - began

    def finish(self) -> Episode:
        if self.episode.failed is not None:
            self.episode.loss_mask = [0] * len(self.episode.loss_mask)
        return self.episode
