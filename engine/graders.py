"""OpenAI-style graders, evaluated in pure Python: the rule reward of reinforcement fine-tuning.

A grader is a JSON object (OpenAI's shapes):

- `string_check`: `{"type", "name", "input", "reference", "operation": eq | ne | like | ilike}` -> 1.0 or
  0.0 (`like`: `reference` occurs in `input`; `ilike`: the same, ignoring case).
- `text_similarity`: `{"type", "name", "input", "reference", "evaluation_metric"}` -> a score in [0, 1]:
  `fuzzy_match` (rapidfuzz's normalised Indel ratio), `bleu`, `gleu`, `meteor` (nltk; METEOR with exact
  and stem matches only: WordNet synonyms are not available offline), `rouge_1` .. `rouge_5`, `rouge_l`
  (rouge-score, F-measure). `cosine` needs an embedding model and is refused.
- `multi`: `{"type", "name", "graders": {name: grader}, "calculate_output": "0.5 * a + 0.5 * b"}`: the
  formula is parsed with `ast` and may use numbers, the graders' names, `+ - * / **`, unary signs and
  `min`, `max`, `abs`, `round` (never `eval`).
- `python` and `score_model`: not evaluated here yet (refused by `validate`).

Templates: `{{sample.output_text}}` (the response), `{{sample.output_json.<field>}}`, and
`{{item.<field>}}` (a field of the dataset row, dotted for nested objects). A field that is missing is
a `GraderError` whose `param` names the template.

The reward function `grader` (registered in engine.rewards) takes the grader as the JSON string option
`grader` and the dataset row as JSON in `ground_truth`. `python -m engine.graders` reads
`{"op": "validate" | "run", "grader", "item", "model_sample"}` on stdin and writes the result as JSON:
how the API validates and runs graders without importing the engine.
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
import time
from functools import lru_cache
from typing import Any

TYPES = ("string_check", "text_similarity", "multi", "python", "score_model")
OPERATIONS = ("eq", "ne", "like", "ilike")
METRICS = ("fuzzy_match", "bleu", "gleu", "meteor", "rouge_1", "rouge_2", "rouge_3", "rouge_4", "rouge_5",
           "rouge_l")
_UNSUPPORTED_METRICS = {"cosine": "needs an embedding model, which Keel does not run for graders"}
_FIELDS = {
    "string_check": ({"type", "name", "input", "reference", "operation"}, set()),
    "text_similarity": ({"type", "name", "input", "reference", "evaluation_metric"}, {"pass_threshold"}),
    "multi": ({"type", "name", "graders", "calculate_output"}, set()),
}
"""(required, optional) fields per supported type."""
_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_PATH = re.compile(r"(sample|item)(\.[A-Za-z0-9_\-]+)+")
_FUNCTIONS = {"min": min, "max": max, "abs": abs, "round": round}
MAX_DEPTH = 4
"""`multi` graders nest at most this deep."""


class GraderError(Exception):
    """A bad grader, or a template naming a field the sample or item lacks; `param` is the field."""

    def __init__(self, message: str, param: str = "grader") -> None:
        super().__init__(message)
        self.message, self.param = message, param


# --- validation ------------------------------------------------------------------------------------

def validate(spec: Any, param: str = "grader", depth: int = 0) -> None:
    """Raise GraderError naming the first bad field."""
    if not isinstance(spec, dict):
        raise GraderError("must be an object", param)
    kind = spec.get("type")
    if kind not in TYPES:
        raise GraderError(f"unknown grader type {kind!r}; supported: {', '.join(_FIELDS)}", f"{param}.type")
    if kind in ("python", "score_model"):
        raise GraderError(f"{kind} graders are not supported by this Keel deployment yet", f"{param}.type")
    required, optional = _FIELDS[kind]
    for key in sorted(required - set(spec)):
        raise GraderError("missing", f"{param}.{key}")
    for key in sorted(set(spec) - required - optional):
        raise GraderError(f"unknown field for a {kind} grader", f"{param}.{key}")
    if not isinstance(spec["name"], str):
        raise GraderError("must be a string", f"{param}.name")
    if kind == "multi":
        _validate_multi(spec, param, depth)
        return
    for key in ("input", "reference"):
        if not isinstance(spec[key], str):
            raise GraderError("must be a string (a template)", f"{param}.{key}")
        template_refs(spec[key], f"{param}.{key}")
    if kind == "string_check" and spec["operation"] not in OPERATIONS:
        raise GraderError(f"must be one of {', '.join(OPERATIONS)}", f"{param}.operation")
    if kind == "text_similarity":
        metric = spec["evaluation_metric"]
        if metric in _UNSUPPORTED_METRICS:
            raise GraderError(f"{metric!r} is not supported: {_UNSUPPORTED_METRICS[metric]}",
                              f"{param}.evaluation_metric")
        if metric not in METRICS:
            raise GraderError(f"must be one of {', '.join(METRICS)}", f"{param}.evaluation_metric")


def _validate_multi(spec: dict[str, Any], param: str, depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise GraderError(f"multi graders nest at most {MAX_DEPTH} deep", param)
    graders = spec["graders"]
    if not isinstance(graders, dict) or not graders:
        raise GraderError("must be a non-empty object of named graders", f"{param}.graders")
    for name, sub in graders.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in _FUNCTIONS:
            raise GraderError("grader names must be identifiers (and not min, max, abs or round)",
                              f"{param}.graders.{name}")
        validate(sub, f"{param}.graders.{name}", depth + 1)
    if not isinstance(spec["calculate_output"], str):
        raise GraderError("must be a string", f"{param}.calculate_output")
    _formula(spec["calculate_output"], frozenset(graders), f"{param}.calculate_output")


def template_refs(template: str, param: str = "template") -> list[tuple[str, ...]]:
    """The `sample.`/`item.` paths a template reads, as tuples (`("item", "answer")`)."""
    out = []
    for m in _TEMPLATE.finditer(template):
        path = m.group(1)
        if not _PATH.fullmatch(path):
            raise GraderError(f"template variable {{{{{path}}}}} must be sample.<field> or item.<field>", param)
        out.append(tuple(path.split(".")))
    return out


def item_fields(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(top-level item field, param of the template) for every `{{item.<field>...}}` in a valid grader."""
    return [(ref[1], param) for param, template in _templates(spec, "grader")
            for ref in template_refs(template, param) if ref[0] == "item"]


def _templates(spec: dict[str, Any], param: str) -> list[tuple[str, str]]:
    if spec.get("type") == "multi":
        return [t for name, sub in spec["graders"].items() for t in _templates(sub, f"{param}.graders.{name}")]
    return [(f"{param}.{k}", spec[k]) for k in ("input", "reference") if isinstance(spec.get(k), str)]


# --- the formula of `multi` -----------------------------------------------------------------------

_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.Pow: lambda a, b: a ** b}
_UNARY = {ast.UAdd: lambda a: +a, ast.USub: lambda a: -a}


@lru_cache(maxsize=256)
def _formula(text: str, names: frozenset[str], param: str) -> ast.Expression:
    """Parse and check a formula: only numbers, the names, + - * / **, unary signs, min/max/abs/round."""
    if len(text) > 2000:
        raise GraderError("at most 2000 characters", param)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise GraderError(f"not a formula: {e.msg}", param) from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Expression | ast.Load) or type(node) in _BINARY or type(node) in _UNARY:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            continue
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            continue
        if isinstance(node, ast.Name) and (node.id in names or node.id in _FUNCTIONS):
            continue
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
                and not node.keywords and node.args):
            continue
        what = node.id if isinstance(node, ast.Name) else type(node).__name__
        raise GraderError(f"{what!r} is not allowed: use numbers, the graders' names, + - * / **, "
                          "min, max, abs and round", param)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _FUNCTIONS and not any(
                isinstance(c, ast.Call) and c.func is node for c in ast.walk(tree)):
            raise GraderError(f"{node.id!r} must be called", param)
    return tree


def _evaluate(node: ast.AST, values: dict[str, float]) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, values)
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(node.operand, values))
    if isinstance(node, ast.BinOp):
        a, b = _evaluate(node.left, values), _evaluate(node.right, values)
        if isinstance(node.op, ast.Pow) and abs(b) > 64:
            raise GraderError("exponents are limited to +-64", "calculate_output")
        return float(_BINARY[type(node.op)](a, b))
    if isinstance(node, ast.Call):
        args = [_evaluate(a, values) for a in node.args]
        return float(_FUNCTIONS[node.func.id](*args))
    raise GraderError(f"unexpected {type(node).__name__}", "calculate_output")


# --- evaluation ------------------------------------------------------------------------------------

def render(template: str, sample: dict[str, Any], item: dict[str, Any], param: str = "template") -> str:
    """Fill `{{sample.x}}` / `{{item.x.y}}`; a missing field raises GraderError."""
    roots = {"sample": sample, "item": item}

    def value(m: re.Match[str]) -> str:
        path = m.group(1).split(".")
        if not _PATH.fullmatch(m.group(1)):
            raise GraderError(f"template variable {m.group(0)} must be sample.<field> or item.<field>", param)
        current: Any = roots[path[0]]
        for part in path[1:]:
            if isinstance(current, dict) and part in current:
                current = current[part]
            elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
                current = current[int(part)]
            else:
                raise GraderError(f"template field {m.group(1)} is missing", param)
        if current is None:
            return ""
        return current if isinstance(current, str) else json.dumps(current, ensure_ascii=False)

    return _TEMPLATE.sub(value, template)


def grade(spec: dict[str, Any], sample: dict[str, Any], item: dict[str, Any], param: str = "grader",
          scores: dict[str, float] | None = None) -> float:
    """The grader's score of one sample (`output_text`, `output_json`) for one dataset row."""
    kind = spec["type"]
    if kind == "multi":
        values = {name: grade(sub, sample, item, f"{param}.graders.{name}", scores)
                  for name, sub in spec["graders"].items()}
        tree = _formula(spec["calculate_output"], frozenset(spec["graders"]), f"{param}.calculate_output")
        try:
            out = _evaluate(tree, values)
        except (ZeroDivisionError, OverflowError, ValueError, TypeError) as e:
            raise GraderError(f"calculate_output failed: {e}", f"{param}.calculate_output") from None
    else:
        text = render(spec["input"], sample, item, f"{param}.input")
        reference = render(spec["reference"], sample, item, f"{param}.reference")
        out = _string_check(spec["operation"], text, reference) if kind == "string_check" \
            else similarity(spec["evaluation_metric"], text, reference)
    if scores is not None:
        scores[spec.get("name") or param] = out
    return out


def _string_check(operation: str, text: str, reference: str) -> float:
    if operation == "eq":
        return float(text == reference)
    if operation == "ne":
        return float(text != reference)
    if operation == "like":
        return float(reference in text)
    return float(reference.lower() in text.lower())


class _NoWordNet:
    """Stands in for nltk's WordNet in METEOR: no synonym matches (the corpus is not shipped)."""

    @staticmethod
    def synsets(*_: Any, **__: Any) -> list[Any]:
        return []


def similarity(metric: str, text: str, reference: str) -> float:
    """`text` scored against `reference` by `metric` (one of METRICS), in [0, 1]."""
    if metric == "fuzzy_match":
        from rapidfuzz import fuzz

        return fuzz.ratio(text, reference) / 100.0
    hyp, ref = text.split(), reference.split()
    if metric == "bleu":
        from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

        return float(sentence_bleu([ref], hyp, smoothing_function=SmoothingFunction().method1)) if hyp else 0.0
    if metric == "gleu":
        from nltk.translate.gleu_score import sentence_gleu

        return float(sentence_gleu([ref], hyp)) if hyp else 0.0
    if metric == "meteor":
        from nltk.translate.meteor_score import meteor_score

        return float(meteor_score([ref], hyp, wordnet=_NoWordNet())) if hyp and ref else 0.0
    kind = "rougeL" if metric == "rouge_l" else "rouge" + metric.removeprefix("rouge_")
    return float(_rouge(kind).score(reference, text)[kind].fmeasure)


@lru_cache(maxsize=8)
def _rouge(kind: str) -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer([kind])


@lru_cache(maxsize=64)
def _parsed(grader: str) -> dict[str, Any]:
    spec = json.loads(grader)
    validate(spec)
    return spec


def sample_of(text: str) -> dict[str, Any]:
    try:
        output_json = json.loads(text)
    except ValueError:
        output_json = None
    return {"output_text": text, "output_json": output_json}


def grader_reward(response: str, ground_truth: str | None, *, grader: str = "", **_: Any) -> float:
    """Reward function `grader`: the grader (JSON, option `grader`) on the response, with the row
    (JSON in `ground_truth`) as `item`. A template field missing from a row scores 0.0."""
    spec = _parsed(grader)
    item = json.loads(ground_truth) if ground_truth else {}
    try:
        score = grade(spec, sample_of(response), item if isinstance(item, dict) else {})
    except GraderError:
        return 0.0
    return score if math.isfinite(score) else 0.0


# --- `python -m engine.graders`: the API's way in ---------------------------------------------------

def run(request: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's `graders/run` and `graders/validate` answers, or `{"error": {message, param}}`."""
    spec = request.get("grader")
    try:
        validate(spec)
    except GraderError as e:
        return {"error": {"message": e.message, "param": e.param}}
    if request.get("op") == "validate":
        return {"grader": spec, "item_fields": item_fields(spec)}
    sample = request.get("model_sample")
    sample = sample_of(sample) if isinstance(sample, str) else sample if isinstance(sample, dict) else sample_of("")
    item = request.get("item") if isinstance(request.get("item"), dict) else {}
    scores: dict[str, float] = {}
    errors: dict[str, Any] = {}
    start = time.perf_counter()
    try:
        reward = grade(spec, sample, item, scores=scores)
    except GraderError as e:
        reward, errors = 0.0, {"message": e.message, "param": e.param, "formula_parse_error": False,
                               "sample_parse_error": False}
    sub = {k: v for k, v in scores.items() if k != spec.get("name")} if spec["type"] == "multi" else {}
    return {"reward": reward, "sub_rewards": sub, "model_grader_token_usage_per_model": {},
            "metadata": {"name": spec.get("name"), "type": spec["type"], "errors": errors,
                         "execution_time": time.perf_counter() - start, "scores": scores,
                         "token_usage": None, "sampled_model_name": None}}


def _main() -> None:
    request = json.loads(sys.stdin.read() or "{}")
    sys.stdout.write(json.dumps(run(request if isinstance(request, dict) else {})))


if __name__ == "__main__":
    _main()
