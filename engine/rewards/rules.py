"""Rule rewards for verifiable tasks: a registry of plain Python functions.

A reward function scores one response::

    def my_reward(response: str, ground_truth: str | None, **info) -> float

`info` always holds `prompt` (the prompt text), `data_source` (the row's, or None),
`response_ids` (the response token ids, EOS included when generated), `num_tokens`,
`max_tokens` (the job's `data.max_response_length`), and the job's `options` (see below) as
keyword arguments. Accept `**info` and ignore what you do not need. Return a finite float: a NaN
or inf score is treated as a diverging step (the PPO guardrails roll back).

Built-ins:

- `gsm8k`: VERL's GSM8K scorer, strict mode: the last `#### <number>` (digits, `-`, `.`, `,`) in
  the final 300 characters of the response, with `,` removed, compared as a string with the ground
  truth as given: `score` (1.0) when equal, `format_score` (0.0) when an answer is present but wrong,
  0.0 when there is none.
- `gsm8k_flexible`: VERL's flexible mode: the last number anywhere in those 300 characters (not a
  lone `.`), as written, compared the same way: for models that do not emit `####`.
- `exact_match`: 1.0 when the stripped response equals the stripped ground truth
  (`ignore_case=False`).
- `regex`: 1.0 when `pattern` (an option, else the ground truth) matches the response
  (`re.search`, `flags` given as a string such as `"IS"`).
- `length_penalty`: `-coef * max(0, num_tokens - target_length) / max(1, max_tokens - target_length)`,
  in [-coef, 0]: pushes towards responses no longer than `target_length` (default 0).
- `code_tests`: the fraction of the row's tests (`ground_truth`: `{"tests": [...]}`) the response's code
  passes, run in the sandbox (engine/rewards/code_tests.py; options `timeout_s`, `parallel`).

Choosing a reward: a job's `reward` is either `{"model_path": dir}` (a reward model) or a rule:
`{"function": "gsm8k", "options": {"format_score": 0.1}}` uses one function for every row, and
`{"function": "data_source"}` (or `{}`) picks the function per row by its `data_source` column:
the registered name itself (`gsm8k`) or an alias (`openai/gsm8k`).

Adding your own: register a function under a name with the decorator::

    from engine.rewards.rules import register_reward

    @register_reward("shouting")
    def shouting(response, ground_truth, **info):
        return sum(c.isupper() for c in response) / max(1, len(response))

or, for a service deployment, ship it in an installed package that declares an entry point in the
group `keel.rewards` (the entry point's name is the reward's name), e.g. in `pyproject.toml`::

    [project.entry-points."keel.rewards"]
    shouting = "my_rewards.scoring:shouting"

Entry points are looked up when a job names a function that is not registered in the process; the
function object then travels to the reward worker, so it must be picklable (a module-level
function).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import entry_points
from typing import Any

from engine.errors import ConfigError, DataError
from engine.rewards.code_tests import check_options as code_tests_options
from engine.rewards.code_tests import code_tests_reward, deployment_limits
from engine.rewards.graders import grader_reward, job_grader

RewardFn = Callable[..., float]
ENTRY_POINT_GROUP = "keel.rewards"
PER_ROW = "data_source"
"""`reward.function` value that picks the function per row by `data_source`."""

_REGISTRY: dict[str, RewardFn] = {}
_ALIASES: dict[str, str] = {"openai/gsm8k": "gsm8k", "gsm8k_strict": "gsm8k"}


def register_reward(name: str, *, aliases: Iterable[str] = ()) -> Callable[[RewardFn], RewardFn]:
    """Decorator: make `fn` available as reward `name` (and each alias) in this process."""
    def wrap(fn: RewardFn) -> RewardFn:
        _REGISTRY[name] = fn
        for alias in aliases:
            _ALIASES[alias] = name
        return fn
    return wrap


def unregister_reward(name: str) -> None:
    """Remove a registered reward (tests)."""
    _REGISTRY.pop(name, None)


def get_reward(name: str, *, param: str = "reward.function") -> RewardFn:
    """The function registered as `name` (or an alias of it), else an entry point of group
    `keel.rewards` with that name. Raises `ConfigError` when there is none."""
    key = _ALIASES.get(name, name)
    if key in _REGISTRY:
        return _REGISTRY[key]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in (name, key):
            fn = ep.load()
            _REGISTRY[key] = fn
            return fn
    raise ConfigError(f"unknown reward function {name!r}; registered: {', '.join(available())}", param=param)


def available() -> list[str]:
    """Names of the registered rewards and of the installed `keel.rewards` entry points."""
    return sorted(set(_REGISTRY) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def resolve_rule_rewards(spec: Mapping[str, Any], data_sources: Iterable[str | None]) -> dict[str, RewardFn]:
    """The functions a rule-reward job needs, by name, resolved in the calling process.

    Per job (`{"function": name}`): `{name: fn}`. Per row (`{"function": "data_source"}` or no
    function): one entry per distinct `data_source` of the datasets; a row without one, or with an
    unknown one, raises `DataError(param="data_source")`.
    """
    name = spec.get("function") or PER_ROW
    if name != PER_ROW:
        return {name: get_reward(name)}
    out: dict[str, RewardFn] = {}
    for source in sorted({s for s in data_sources}, key=lambda s: (s is None, s or "")):
        if source is None:
            raise DataError("reward is chosen per row by data_source, but a row has none", param="data_source")
        try:
            out[source] = get_reward(source, param="data_source")
        except ConfigError as err:
            raise DataError(err.message, param="data_source", data={"data_source": source}) from None
    return out


def rule_reward_kwargs(spec: Mapping[str, Any], data_sources: Iterable[str | None]) -> dict[str, Any]:
    """The `Reward` role's keyword arguments for a rule reward (`resolve_rule_rewards`, the name, the
    options). For `grader`, the job request's `grading` too (python-grader limits, score-model paths),
    and the grader is checked here, in the driver: a bad or disallowed one fails the job before any
    role starts (`ConfigError`, `param` under `method.reward.options.grader`)."""
    functions = resolve_rule_rewards(spec, data_sources)
    name = spec.get("function") or PER_ROW
    out = {"functions": functions, "function": None if name == PER_ROW else name,
           "options": dict(spec.get("options") or {})}
    if name == "grader":
        job_grader(out["options"], spec.get("grading"))
        out["grading"] = dict(spec.get("grading") or {})
    if name == PER_ROW and "code_tests" in functions:  # per row it would run without the deployment's limits
        raise DataError("code_tests is chosen for the whole job (reward.function), not by a row's data_source",
                        param="data_source", data={"data_source": "code_tests"})
    if name == "code_tests":  # checked here too: bad options or a deployment without python fail before roles start
        code_tests_options(out["options"])
        deployment_limits(spec.get("grading"))
        out["grading"] = spec.get("grading")
    return out


def score_response(fn: RewardFn, response: str, ground_truth: str | None, **info: Any) -> float:
    """Call a reward function and coerce its result to float (NaN when it is not a number)."""
    value = fn(response, ground_truth, **info)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


# --- built-ins -----------------------------------------------------------------------------------

_GSM8K_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_GSM8K_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")
_GSM8K_TAIL = 300
"""Only the end of a response is searched: a long answer cannot win by listing many numbers."""


def extract_gsm8k_answer(response: str, *, flexible: bool = False) -> str | None:
    """VERL's GSM8K extraction over the final 300 characters. Strict: the last `#### <number>`, with
    `,` removed. Flexible: the last number anywhere that is not a lone `.`, as written."""
    tail = response[-_GSM8K_TAIL:]
    if not flexible:
        found = _GSM8K_STRICT.findall(tail)
        return found[-1].replace(",", "").replace("$", "") if found else None
    return next((n for n in reversed(_GSM8K_NUMBER.findall(tail)) if n not in ("", ".")), None)


def _gsm8k_score(answer: str | None, ground_truth: str | None, format_score: float, score: float) -> float:
    if answer is None:
        return 0.0
    return float(score) if answer == ground_truth else float(format_score)


@register_reward("gsm8k", aliases=("openai/gsm8k",))
def gsm8k(response: str, ground_truth: str | None, *, format_score: float = 0.0, score: float = 1.0,
          **_: Any) -> float:
    """GSM8K answer correctness, VERL's strict rule (see the module docstring)."""
    return _gsm8k_score(extract_gsm8k_answer(response), ground_truth, format_score, score)


@register_reward("gsm8k_flexible")
def gsm8k_flexible(response: str, ground_truth: str | None, *, format_score: float = 0.0, score: float = 1.0,
                   **_: Any) -> float:
    """GSM8K correctness, VERL's flexible rule: the last number in the response is the answer."""
    return _gsm8k_score(extract_gsm8k_answer(response, flexible=True), ground_truth, format_score, score)


@register_reward("exact_match")
def exact_match(response: str, ground_truth: str | None, *, ignore_case: bool = False, **_: Any) -> float:
    """1.0 when the stripped response equals the stripped ground truth."""
    if ground_truth is None:
        return 0.0
    a, b = response.strip(), str(ground_truth).strip()
    if ignore_case:
        a, b = a.lower(), b.lower()
    return 1.0 if a == b else 0.0


@register_reward("regex")
def regex(response: str, ground_truth: str | None, *, pattern: str | None = None, flags: str = "",
          **_: Any) -> float:
    """1.0 when `pattern` (else the ground truth, as a pattern) is found in the response."""
    pattern = pattern if pattern is not None else ground_truth
    if not pattern:
        return 0.0
    bits = 0
    for letter in flags.upper():
        bits |= getattr(re, letter)
    return 1.0 if re.search(pattern, response, bits) else 0.0


@register_reward("length_penalty")
def length_penalty(response: str, ground_truth: str | None, *, num_tokens: int = 0, max_tokens: int = 1,
                   target_length: int = 0, coef: float = 1.0, **_: Any) -> float:
    """`-coef * excess / (max_tokens - target_length)`, excess = tokens over `target_length`."""
    excess = max(0, int(num_tokens) - int(target_length))
    return -float(coef) * excess / max(1, int(max_tokens) - int(target_length))


# OpenAI-style graders (reinforcement fine-tuning): `{"function": "grader", "options": {"grader": "<json>"}}`.
register_reward("grader")(grader_reward)
# Code execution against the row's tests, in the python graders' sandbox (engine/rewards/code_tests.py).
register_reward("code_tests")(code_tests_reward)
