"""Small learnable games shipped for tests and demos (`make_game`), deterministic given (row, seed).

- `echo_token` (`{"type": "echo_token", "words": [...]}`): two turns. Whatever the assistant says first,
  the environment answers with a user message naming a target word (`Say: <word>`), picked from `words`
  (default `WORDS`) by the row and the context's seed; the episode's reward is 1.0 when the assistant's
  second turn contains the word (as a substring), else 0.0, and it ends there. The default words are
  one token each in the demo tokenizer, with or without a leading space, and about a tenth of its
  vocabulary contains one of them: the tiny untrained demo model hits a target in about one of five
  8-token turns, a signal dense enough to climb in a few PPO steps (a long word such as `bread` is a
  single token of 1,024: about 1%).
- `arithmetic` (`{"type": "arithmetic"}`): the row's question (the demo `prompts` rows: "What is 3 + 4?",
  `ground_truth` "7"; without a ground truth, the `a + b` / `a - b` / `a * b` the prompt states) with the
  `calculator` tool available (`engine.environments.tools`). A turn with tool calls gets their results;
  the first turn without one is the answer: reward 1.0 when its number (GSM8K's `#### N`, else the last
  number in the text) equals the result, else 0.0.

Both give their outcome as `Step.final_reward` (the job's reward function is not called) and no per-turn
rewards, so a trainer that adds per-turn rewards to the outcome does not count one twice.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from engine.environments.base import EnvironmentFailure, Step
from engine.environments.tool_calls import parse_tool_calls
from engine.environments.tools import calculator_tool, checked_format, run_calls
from engine.errors import EngineError
from engine.rollout.sampling import row_seed

WORDS = ("in", "at", "an", "on")
"""Short words, each one token in the demo tokenizer (with and without a leading space)."""
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_QUESTION = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)")
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def make_game(spec: Mapping[str, Any], context: Any) -> EchoToken | Arithmetic:
    kind = spec.get("type")
    if kind == "echo_token":
        return EchoToken(spec, context)
    if kind == "arithmetic":
        return Arithmetic(spec, context)
    raise EngineError(f"unknown game {kind!r}", code="invalid_environment", param="environment.type")


def row_key(row: Mapping[str, Any]) -> int:
    """A stable 32-bit hash of the row's prompt (the whole row when it has none)."""
    prompt = row.get("prompt", row.get("conversation"))
    text = json.dumps(prompt if prompt is not None else dict(row), sort_keys=True, default=str)
    return zlib.crc32(text.encode())


class EchoToken:
    """Say the word the environment names (see the module doc)."""

    def __init__(self, spec: Mapping[str, Any], context: Any) -> None:
        words = spec.get("words", WORDS)
        if (not isinstance(words, Sequence) or isinstance(words, str) or not words
                or not all(isinstance(w, str) and w.strip() and len(w) <= 32 for w in words)):
            raise EngineError("environment.words must be a non-empty list of short words (1 to 32 characters)",
                              code="invalid_environment", param="environment.words")
        self.words = [w.strip() for w in words]
        self.seed = int(getattr(context, "seed", 0) or 0)
        self.target = ""
        self.turn = 0

    def reset(self, row: Mapping[str, Any]) -> list[dict[str, Any]]:
        self.target = self.words[row_seed(self.seed, row_key(row)) % len(self.words)]
        self.turn = 0
        return []

    def step(self, text: str) -> Step:
        self.turn += 1
        if self.turn == 1:
            return Step(messages=[{"role": "user", "content": f"Say: {self.target}"}])
        return Step(done=True, final_reward=1.0 if self.target in text else 0.0)

    def close(self) -> None:
        pass


class Arithmetic:
    """Answer the row's arithmetic question, with a calculator (see the module doc)."""

    def __init__(self, spec: Mapping[str, Any], context: Any) -> None:
        self.tools = {"calculator": calculator_tool}
        self.tool_format = checked_format(context)
        self.answer: float | None = None

    def reset(self, row: Mapping[str, Any]) -> list[dict[str, Any]]:
        self.answer = expected_answer(row)
        if self.answer is None:
            raise EnvironmentFailure("arithmetic: the row has no numeric ground_truth and its prompt states no "
                                     "'a + b' question")
        return []

    def step(self, text: str) -> Step:
        calls = parse_tool_calls(text, self.tool_format)
        if calls:
            messages, errors = run_calls(calls, self.tools)
            return Step(messages=messages, tool_calls=len(calls), tool_errors=errors)
        given = final_number(text)
        right = given is not None and self.answer is not None and abs(given - self.answer) < 1e-9
        return Step(done=True, final_reward=1.0 if right else 0.0)

    def close(self) -> None:
        pass


def expected_answer(row: Mapping[str, Any]) -> float | None:
    """The row's `ground_truth` as a number, else the value of the `a op b` its prompt states."""
    truth = row.get("ground_truth")
    if truth is not None:
        try:
            return float(str(truth).replace(",", "").strip())
        except ValueError:
            pass
    prompt = row.get("prompt", "")
    if not isinstance(prompt, str):  # a chat: the last user message
        users = [m.get("content", "") for m in prompt or [] if isinstance(m, Mapping) and m.get("role") == "user"]
        prompt = users[-1] if users else ""
    found = _QUESTION.search(prompt)
    return float(_OPS[found[2]](int(found[1]), int(found[3]))) if found else None


def final_number(text: str) -> float | None:
    """The answer a turn gives: the number after its last `####`, else its last number."""
    marked = text.rsplit("####", 1)
    numbers = _NUMBER.findall(marked[1] if len(marked) == 2 else text)
    if not numbers:
        return None
    return float(numbers[0] if len(marked) == 2 else numbers[-1])
