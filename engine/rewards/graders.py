"""OpenAI-style graders: the reward of reinforcement fine-tuning, and `graders/run`.

A grader is a JSON object (OpenAI's shapes; validation in engine/rewards/grader_spec.py names the bad field):

- `string_check`: `{"type", "name", "input", "reference", "operation": eq | ne | like | ilike}` -> 1.0 or
  0.0 (`like`: `reference` occurs in `input`; `ilike`: the same, ignoring case).
- `text_similarity`: `{"type", "name", "input", "reference", "evaluation_metric"}` -> a score in [0, 1]:
  `fuzzy_match` (rapidfuzz's normalised Indel ratio), `bleu`, `gleu`, `meteor` (nltk; METEOR with exact
  and stem matches only: WordNet synonyms are not available offline), `rouge_1` .. `rouge_5`, `rouge_l`
  (rouge-score, F-measure). `cosine` needs an embedding model and is refused. Texts over a metric's size
  (engine/rewards/similarity.py `LIMITS`: `rouge_l` 2,000 words, `fuzzy_match` 100,000 characters, the
  others 50,000 words, per side) fail the sample (`other_error`).
- `multi`: `{"type", "name", "graders": {name: grader}, "calculate_output": "0.5 * a + 0.5 * b"}`: the
  formula is parsed with `ast` (engine/rewards/formula.py) and may use numbers, the graders' names,
  `+ - * / **`, unary signs and `min`, `max`, `abs`, `round` (never `eval`). A member that fails fails
  the sample.
- `python`: `{"type", "name", "source", "image_tag"?}`: `grade(sample, item)` of the source, in a fresh
  sandboxed process per batch (engine/rewards/sandbox.py and sandboxed.py: resource limits, user+net
  namespaces, Landlock, seccomp, an audit hook). Off unless the deployment allows it
  (`KEEL_ALLOW_PYTHON_GRADERS`; the worker passes `Context.python`): else `python_graders_disabled`.
  `image_tag` is accepted and ignored (the worker's own Python runs the grader).
- `score_model`: `{"type", "name", "model", "input": [messages], "range"?, "sampling_params"?}`: a Keel
  model scores the sample: a reward model's scalar through a sigmoid into `range`, or a policy used as
  a judge whose first number, clamped to `range`, is the score (engine/rewards/score_model.py). The
  model is loaded once per process and reused for every batch.

Templates: `{{sample.output_text}}` (the response), `{{sample.output_json.<field>}}`, and
`{{item.<field>}}` (a field of the dataset row, dotted for nested objects); a multi-turn episode's sample
(`sample_of(final_text, messages)`) adds `{{sample.output_tools}}` and `{{sample.messages}}`. A field that is missing is
a `GraderError` whose `param` names the template.

A sample a grader cannot score (a missing field, a python grader that raises, returns something that is
not a finite number or exceeds a limit, a judge without a number) scores 0.0, with the reason in
`Result.error`: OpenAI's error flags (`errors_object`) in `graders/run`'s `metadata.errors`.

The reward function `grader` (registered in engine.rewards.rules) takes the grader as the JSON string option
`grader` and the dataset row as JSON in `ground_truth` (a `ground_truth` that is not a JSON object is
the item `{"ground_truth": ...}`); the PPO Reward role scores whole batches with `job_grader`.
`python -m engine.rewards.graders` reads `{"op": "validate" | "run", "grader", "item", "model_sample",
"python": limits | null, "models": {model: path}, "limits": {"memory_mb", "cpu_s"}}` on stdin and writes the
result as JSON: how the API validates and runs graders without importing the engine. `limits` become the
process's own soft RLIMIT_AS and RLIMIT_CPU (soft only: a python grader's sandbox, its child, sets its own
below the unchanged hard limits); running out of memory is the answer `grader_resources_exceeded`. SIGTERM
(the API's timeout) ends the process through its cleanup: a python grader's sandbox is killed and its
temporary directory removed.
"""

from __future__ import annotations

import json
import math
import resource
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from engine.errors import ConfigError
from engine.rewards.formula import evaluate, parse_formula
from engine.rewards.grader_spec import (
    METRICS,
    OPERATIONS,
    TYPES,
    GraderError,
    episode_sample,
    item_fields,
    model_refs,
    render,
    render_messages,
    template_refs,
    validate,
)
from engine.rewards.sandbox import Limits, run_python
from engine.rewards.similarity import TooLong, similarity, string_check

__all__ = ["METRICS", "OPERATIONS", "TYPES", "Context", "Grader", "GraderError", "Limits", "Result", "grade",
           "grader_reward", "item_fields", "item_of", "job_grader", "model_refs", "render", "run", "sample_of",
           "similarity", "template_refs", "validate"]

ERROR_FLAGS = ("formula_parse_error", "sample_parse_error", "truncated_observation_error",
               "unresponsive_reward_error", "invalid_variable_error", "other_error", "python_grader_server_error",
               "python_grader_runtime_error", "model_grader_server_error", "model_grader_refusal_error",
               "model_grader_parse_error")
"""OpenAI's boolean error fields of `metadata.errors`."""
REWARD_PARAM = "method.reward.options.grader"


@dataclass(frozen=True)
class Context:
    """What a grader may use beyond its JSON: `python` limits (None: python graders are disabled),
    `models` (score_model `model` -> a local directory, or a URL `stage` makes local), and the device
    and dtype score models run in."""

    python: Limits | None = None
    models: Mapping[str, str] = field(default_factory=dict)
    device: Any = "cpu"
    dtype: str = "float32"
    stage: Callable[[str], str] | None = None

    @classmethod
    def from_grading(cls, grading: Mapping[str, Any] | None, **kwargs: Any) -> Context:
        """From the job request's `reward.grading` (`{"python": limits | None, "models": {...}}`)."""
        grading = grading or {}
        python = grading.get("python")
        return cls(python=None if python is None else Limits.from_dict(python),
                   models=dict(grading.get("models") or {}), **kwargs)


@dataclass
class Result:
    """One sample's grade: `score` (0.0 when it failed), each named grader's score, the failure
    (`{"flag", "message", "param"}`) and tokens used per score model."""

    score: float
    scores: dict[str, float]
    error: dict[str, Any] | None
    usage: dict[str, dict[str, int]]


class _Value(NamedTuple):
    value: float | None
    error: dict[str, Any] | None = None


def _failure(flag: str, message: str, param: str) -> _Value:
    return _Value(None, {"flag": flag, "message": message, "param": param})


class Grader:
    """A validated grader that scores batches. Raises GraderError when `spec` is invalid, uses python
    graders without `context.python`, or names a model `context.models` lacks."""

    def __init__(self, spec: Any, context: Context = Context()) -> None:
        validate(spec, allow_python=context.python is not None)
        refs = model_refs(spec)
        for ref, param in refs:
            if ref not in context.models:
                raise GraderError(f"model {ref!r} is not available to this grader", param)
        self.spec, self.context = spec, context
        self.models = None
        if refs:
            from engine.rewards.score_model import ScoreModels

            self.models = ScoreModels(context.models, device=context.device, dtype=context.dtype,
                                      stage=context.stage)

    def score(self, samples: Sequence[dict[str, Any]], items: Sequence[dict[str, Any]]) -> list[Result]:
        """One `Result` per (sample, item): samples are `sample_of(text)` dicts, items dataset rows."""
        scores: list[dict[str, float]] = [{} for _ in samples]
        usage: list[dict[str, dict[str, int]]] = [{} for _ in samples]
        values = self._grade(self.spec, "grader", samples, items, scores, usage)
        return [Result(v.value if v.error is None else 0.0, scores[i], v.error, usage[i])
                for i, v in enumerate(values)]

    def _grade(self, spec: dict[str, Any], param: str, samples: Sequence[dict[str, Any]],
               items: Sequence[dict[str, Any]], scores: list[dict[str, float]],
               usage: list[dict[str, dict[str, int]]]) -> list[_Value]:
        kind = spec["type"]
        if kind == "multi":
            out = self._multi(spec, param, samples, items, scores, usage)
        elif kind == "python":
            outcomes = run_python(spec["source"], samples, items, self.context.python)
            out = [_Value(o.score) if o.error is None else _failure(
                "python_grader_runtime_error" if o.kind == "runtime" else "python_grader_server_error", o.error,
                f"{param}.source") for o in outcomes]
        elif kind == "score_model":
            out = self._score_model(spec, param, samples, items, usage)
        else:
            out = [self._text(spec, kind, param, sample, item) for sample, item in zip(samples, items)]
        for i, v in enumerate(out):
            if v.error is None:
                scores[i][spec.get("name") or param] = v.value
        return out

    @staticmethod
    def _text(spec: dict[str, Any], kind: str, param: str, sample: dict[str, Any], item: dict[str, Any]) -> _Value:
        try:
            text = render(spec["input"], sample, item, f"{param}.input")
            reference = render(spec["reference"], sample, item, f"{param}.reference")
        except GraderError as e:
            return _failure("invalid_variable_error", e.message, e.param)
        if kind == "string_check":
            return _Value(string_check(spec["operation"], text, reference))
        try:
            return _Value(similarity(spec["evaluation_metric"], text, reference))
        except TooLong as e:
            return _failure("other_error", str(e), f"{param}.{e.side}")

    def _multi(self, spec: dict[str, Any], param: str, samples: Sequence[dict[str, Any]],
               items: Sequence[dict[str, Any]], scores: list[dict[str, float]],
               usage: list[dict[str, dict[str, int]]]) -> list[_Value]:
        members = {name: self._grade(sub, f"{param}.graders.{name}", samples, items, scores, usage)
                   for name, sub in spec["graders"].items()}
        tree = parse_formula(spec["calculate_output"], frozenset(spec["graders"]))
        out = []
        for i in range(len(samples)):
            failed = next((v[i].error for v in members.values() if v[i].error is not None), None)
            if failed is not None:
                out.append(_Value(None, failed))
                continue
            try:
                value = evaluate(tree, {name: v[i].value for name, v in members.items()})
            except (ArithmeticError, ValueError, TypeError) as e:
                out.append(_failure("formula_parse_error", f"calculate_output failed: {e}",
                                    f"{param}.calculate_output"))
                continue
            out.append(_Value(value) if math.isfinite(value) else _failure(
                "formula_parse_error", f"calculate_output gave {value}", f"{param}.calculate_output"))
        return out

    def _score_model(self, spec: dict[str, Any], param: str, samples: Sequence[dict[str, Any]],
                     items: Sequence[dict[str, Any]], usage: list[dict[str, dict[str, int]]]) -> list[_Value]:
        out: list[_Value | None] = [None] * len(samples)
        rendered: list[tuple[int, list[dict[str, str]]]] = []
        for i, (sample, item) in enumerate(zip(samples, items)):
            try:
                rendered.append((i, render_messages(spec, sample, item, param)))
            except GraderError as e:
                out[i] = _failure("invalid_variable_error", e.message, e.param)
        if rendered:
            judged = self.models.score(spec, [m for _, m in rendered],
                                       [str(samples[i].get("output_text") or "") for i, _ in rendered])
            for (i, _), j in zip(rendered, judged):
                tokens = usage[i].setdefault(spec["model"], {"prompt_tokens": 0, "completion_tokens": 0,
                                                             "total_tokens": 0, "cached_tokens": 0})
                tokens["prompt_tokens"] += j.prompt_tokens
                tokens["completion_tokens"] += j.completion_tokens
                tokens["total_tokens"] += j.prompt_tokens + j.completion_tokens
                out[i] = _Value(j.score) if j.error is None else _failure(j.kind, j.error, f"{param}.model")
        return [v if v is not None else _Value(None) for v in out]


def errors_object(error: dict[str, Any] | None) -> dict[str, Any]:
    """OpenAI's `metadata.errors`: every flag, the failure's set; Keel adds `message` and `param`."""
    out: dict[str, Any] = {flag: False for flag in ERROR_FLAGS}
    out.update(python_grader_server_error_type=None, python_grader_runtime_error_details=None,
               model_grader_server_error_details=None)
    if error is None:
        return out
    out[error["flag"]] = True
    if error["flag"] == "python_grader_runtime_error":
        out["python_grader_runtime_error_details"] = error["message"]
    elif error["flag"] == "python_grader_server_error":
        out["python_grader_server_error_type"] = "sandbox"
    elif error["flag"] == "model_grader_server_error":
        out["model_grader_server_error_details"] = error["message"]
    out.update(message=error["message"], param=error["param"])
    return out


# --- single samples, the rule reward, the job's grader ------------------------------------------------

def sample_of(text: str, messages: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """A response's sample; with `messages` (a multi-turn episode's transcript, `text` its final assistant
    turn) also `output_tools` and `messages` (grader_spec.episode_sample)."""
    if messages is not None:
        return episode_sample(text, messages)
    try:
        output_json = json.loads(text)
    except ValueError:
        output_json = None
    return {"output_text": text, "output_json": output_json}


def item_of(ground_truth: str | None) -> dict[str, Any]:
    """The grader's `item` for a row: its `ground_truth` when that is a JSON object (OpenAI's rows,
    converted by Keel), else `{"ground_truth": ground_truth}`."""
    if ground_truth is None:
        return {}
    try:
        item = json.loads(ground_truth)
    except (TypeError, ValueError):
        item = None
    return item if isinstance(item, dict) else {"ground_truth": ground_truth}


def grade(spec: dict[str, Any], sample: dict[str, Any], item: dict[str, Any],
          context: Context = Context()) -> float:
    """The score of one sample; raises GraderError when the grader cannot score it."""
    result = Grader(spec, context).score([sample], [item])[0]
    if result.error is not None:
        raise GraderError(result.error["message"], result.error["param"])
    return result.score


@lru_cache(maxsize=64)
def _rule_grader(grader: str) -> Grader:
    return Grader(json.loads(grader))


def grader_reward(response: str, ground_truth: str | None, *, grader: str = "", **_: Any) -> float:
    """Reward function `grader`: the grader (JSON, option `grader`) on the response, with the row
    (`item_of(ground_truth)`) as `item`. A sample the grader cannot score scores 0.0. Python and
    score_model graders need a job's context: the Reward role scores those with `job_grader`."""
    return _rule_grader(grader).score([sample_of(response)], [item_of(ground_truth)])[0].score


def job_grader(options: Mapping[str, Any], grading: Mapping[str, Any] | None, **context: Any) -> Grader:
    """The grader of a job whose reward is `{"function": "grader", "options": {"grader": json}}`, with the
    job request's `reward.grading` as its `Context`. A bad or disallowed grader is a ConfigError whose
    `param` is under `method.reward.options.grader`."""
    try:
        spec = json.loads(options.get("grader") or "")
    except (TypeError, ValueError):
        raise ConfigError("must be a grader object, as JSON", param=REWARD_PARAM) from None
    try:
        return Grader(spec, Context.from_grading(grading, **context))
    except GraderError as e:
        raise ConfigError(e.message, code=e.code, param=e.param.replace("grader", REWARD_PARAM, 1)) from None


# --- `python -m engine.rewards.graders`: the API's way in ---------------------------------------------------

def run(request: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's `graders/run` and `graders/validate` answers, or `{"error": {message, param, code}}`.
    `validate` also returns the `item` fields templates read and the score models named."""
    spec = request.get("grader")
    python = request.get("python")
    try:
        validate(spec, allow_python=python is not None)
    except GraderError as e:
        return {"error": {"message": e.message, "param": e.param, "code": e.code}}
    if request.get("op") == "validate":
        return {"grader": spec, "item_fields": item_fields(spec), "models": model_refs(spec)}
    sample = request.get("model_sample")
    sample = sample_of(sample) if isinstance(sample, str) else sample if isinstance(sample, dict) else sample_of("")
    item = request.get("item") if isinstance(request.get("item"), dict) else {}
    try:
        grader = Grader(spec, Context(python=None if python is None else Limits.from_dict(python),
                                      models=request.get("models") or {}, stage=_stager(request.get("storage"))))
    except GraderError as e:
        return {"error": {"message": e.message, "param": e.param, "code": e.code}}
    start = time.perf_counter()
    result = grader.score([sample], [item])[0]
    sub = {k: v for k, v in result.scores.items() if k != spec.get("name")} if spec["type"] == "multi" else {}
    tokens = sum(u["total_tokens"] for u in result.usage.values())
    return {"reward": result.score, "sub_rewards": sub, "model_grader_token_usage_per_model": result.usage,
            "metadata": {"name": spec.get("name"), "type": spec["type"], "errors": errors_object(result.error),
                         "execution_time": time.perf_counter() - start, "scores": result.scores,
                         "token_usage": tokens or None, "sampled_model_name": next(iter(result.usage), None)}}


def _stager(storage: dict[str, Any] | None) -> Callable[[str], str] | None:
    """Score models kept in a remote store are staged like a job's artifacts."""
    if not storage:
        return None
    from engine.runtime.artifacts import Artifacts

    return Artifacts(options=dict(storage.get("options") or {}), cache_dir=storage.get("cache_dir")).stage


def _limit(limits: Mapping[str, Any]) -> None:
    for which, value in ((resource.RLIMIT_AS, int(limits.get("memory_mb") or 0) * 1024 * 1024),
                         (resource.RLIMIT_CPU, math.ceil(limits.get("cpu_s") or 0))):
        if value > 0:
            resource.setrlimit(which, (value, resource.getrlimit(which)[1]))


def _main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # through every `finally`
    request = json.loads(sys.stdin.read() or "{}")
    request = request if isinstance(request, dict) else {}
    _limit(request.get("limits") if isinstance(request.get("limits"), dict) else {})
    try:
        answer = run(request)
    except Exception as e:
        if not _out_of_memory(e):
            raise
        answer = {"error": {"message": "grading needed more memory than this deployment allows a grader",
                            "param": "grader", "code": "grader_resources_exceeded"}}
    sys.stdout.write(json.dumps(answer))


def _out_of_memory(error: BaseException | None) -> bool:
    """A MemoryError, or a library that could not be loaded for want of address space (the dynamic
    loader's ENOMEM, as an ImportError or OSError), anywhere in `error`'s chain."""
    seen = 0
    while error is not None and seen < 16:
        text = str(error)
        if isinstance(error, MemoryError) or "failed to map segment" in text or "Cannot allocate memory" in text:
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


if __name__ == "__main__":
    _main()
