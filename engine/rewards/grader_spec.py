"""Grader objects: validation (each error names its field as `param`) and templates.

A template reads `{{sample.<field>}}` and `{{item.<field>}}` (dotted paths; list indices as numbers). A
single response's sample holds `output_text` and `output_json`; a multi-turn episode's (`episode_sample`)
adds `output_tools` (OpenAI's name) and `messages` (Keel's: the transcript), so a grader can judge the whole
episode, e.g. a score_model judge given `{{sample.messages}}`."""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from engine.rewards.formula import FUNCTIONS, parse_formula

TYPES = ("string_check", "text_similarity", "multi", "python", "score_model")
OPERATIONS = ("eq", "ne", "like", "ilike")
METRICS = ("fuzzy_match", "bleu", "gleu", "meteor", "rouge_1", "rouge_2", "rouge_3", "rouge_4", "rouge_5",
           "rouge_l")
_UNSUPPORTED_METRICS = {"cosine": "needs an embedding model, which Keel does not run for graders"}
_FIELDS = {
    "string_check": ({"type", "name", "input", "reference", "operation"}, set()),
    "text_similarity": ({"type", "name", "input", "reference", "evaluation_metric"}, {"pass_threshold"}),
    "multi": ({"type", "name", "graders", "calculate_output"}, set()),
    "python": ({"type", "name", "source"}, {"image_tag", "pass_threshold"}),
    "score_model": ({"type", "name", "model", "input"}, {"range", "sampling_params", "pass_threshold"}),
}
"""(required, optional) fields per type."""
ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text")
SAMPLING = {"temperature", "top_p", "max_completions_tokens", "seed", "reasoning_effort"}
MAX_SOURCE_BYTES = 256 * 1024
"""OpenAI's limit on a python grader's source."""
MAX_DEPTH = 4
"""`multi` graders nest at most this deep."""
MAX_MESSAGES = 32
_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_PATH = re.compile(r"(sample|item)(\.[A-Za-z0-9_\-]+)+")


class GraderError(Exception):
    """A bad grader, or a template naming a field the sample or item lacks; `param` is the field and
    `code` the machine-readable reason (`invalid_grader`, `python_graders_disabled`)."""

    def __init__(self, message: str, param: str = "grader", code: str = "invalid_grader") -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


def validate(spec: Any, param: str = "grader", depth: int = 0, *, allow_python: bool = False) -> None:
    """Raise GraderError naming the first bad field. `allow_python`: the deployment runs python graders
    (`KEEL_ALLOW_PYTHON_GRADERS`); otherwise one is `python_graders_disabled` at its `type`."""
    if not isinstance(spec, dict):
        raise GraderError("must be an object", param)
    kind = spec.get("type")
    if kind not in TYPES:
        raise GraderError(f"unknown grader type {kind!r}; supported: {', '.join(TYPES)}", f"{param}.type")
    if kind == "python" and not allow_python:
        raise GraderError("python graders are disabled in this deployment (KEEL_ALLOW_PYTHON_GRADERS)",
                          f"{param}.type", "python_graders_disabled")
    required, optional = _FIELDS[kind]
    for key in sorted(required - set(spec)):
        raise GraderError("missing", f"{param}.{key}")
    for key in sorted(set(spec) - required - optional):
        raise GraderError(f"unknown field for a {kind} grader", f"{param}.{key}")
    if not isinstance(spec["name"], str):
        raise GraderError("must be a string", f"{param}.name")
    if "pass_threshold" in spec and not _number(spec["pass_threshold"]):
        raise GraderError("must be a number", f"{param}.pass_threshold")
    if kind == "multi":
        _validate_multi(spec, param, depth, allow_python)
    elif kind == "python":
        _validate_python(spec, param)
    elif kind == "score_model":
        _validate_score_model(spec, param)
    else:
        _validate_text(spec, kind, param)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _validate_text(spec: dict[str, Any], kind: str, param: str) -> None:
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


def _validate_multi(spec: dict[str, Any], param: str, depth: int, allow_python: bool) -> None:
    if depth >= MAX_DEPTH:
        raise GraderError(f"multi graders nest at most {MAX_DEPTH} deep", param)
    graders = spec["graders"]
    if not isinstance(graders, dict) or not graders:
        raise GraderError("must be a non-empty object of named graders", f"{param}.graders")
    for name, sub in graders.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in FUNCTIONS:
            raise GraderError("grader names must be identifiers (and not min, max, abs or round)",
                              f"{param}.graders.{name}")
        validate(sub, f"{param}.graders.{name}", depth + 1, allow_python=allow_python)
    if not isinstance(spec["calculate_output"], str):
        raise GraderError("must be a string", f"{param}.calculate_output")
    try:
        parse_formula(spec["calculate_output"], frozenset(graders))
    except ValueError as e:
        raise GraderError(str(e), f"{param}.calculate_output") from None


def _validate_python(spec: dict[str, Any], param: str) -> None:
    source = spec["source"]
    if not isinstance(source, str):
        raise GraderError("must be a string (Python source)", f"{param}.source")
    if len(source.encode()) > MAX_SOURCE_BYTES:
        raise GraderError(f"at most {MAX_SOURCE_BYTES // 1024} KiB", f"{param}.source")
    if "image_tag" in spec and not isinstance(spec["image_tag"], str):
        raise GraderError("must be a string", f"{param}.image_tag")
    try:
        tree = ast.parse(source, "<grader>")
    except (SyntaxError, ValueError) as e:
        where = f"line {e.lineno}: " if getattr(e, "lineno", None) else ""
        raise GraderError(f"not valid Python: {where}{getattr(e, 'msg', e)}", f"{param}.source") from None
    for node in tree.body:
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "grade":
            raise GraderError("grade must be a plain function, not async", f"{param}.source")
        if isinstance(node, ast.FunctionDef) and node.name == "grade":
            return
        targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                   if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == "grade" for t in targets):
            return
        if isinstance(node, ast.Import | ast.ImportFrom) and any(
                (a.asname or a.name) == "grade" for a in node.names):
            return
    raise GraderError("must define grade(sample, item) at the top level", f"{param}.source")


def _validate_score_model(spec: dict[str, Any], param: str) -> None:
    model = spec["model"]
    if not isinstance(model, str) or not model or len(model) > 256:
        raise GraderError("must be a model id (a non-empty string of at most 256 characters)", f"{param}.model")
    messages = spec["input"]
    if not isinstance(messages, list) or not 1 <= len(messages) <= MAX_MESSAGES:
        raise GraderError(f"must be a list of 1 to {MAX_MESSAGES} messages", f"{param}.input")
    for i, message in enumerate(messages):
        where = f"{param}.input.{i}"
        if not isinstance(message, dict):
            raise GraderError("must be a message object (role, content)", where)
        for key in sorted(set(message) - {"role", "content", "type"}):
            raise GraderError("unknown field of a message", f"{where}.{key}")
        if message.get("type", "message") != "message":
            raise GraderError("must be 'message'", f"{where}.type")
        if message.get("role") not in ROLES:
            raise GraderError(f"must be one of {', '.join(ROLES)}", f"{where}.role")
        if "content" not in message:
            raise GraderError("missing", f"{where}.content")
        for text, part in _content_texts(message["content"], f"{where}.content"):
            template_refs(text, part)
    if "range" in spec:
        bounds = spec["range"]
        if (not isinstance(bounds, list) or len(bounds) != 2 or not all(_number(b) for b in bounds)
                or not bounds[0] < bounds[1]):
            raise GraderError("must be [low, high], two finite numbers with low < high", f"{param}.range")
    sampling = spec.get("sampling_params")
    if sampling is None:
        return
    if not isinstance(sampling, dict):
        raise GraderError("must be an object", f"{param}.sampling_params")
    for key in sorted(set(sampling) - SAMPLING):
        raise GraderError(f"unknown sampling parameter; supported: {', '.join(sorted(SAMPLING))}",
                          f"{param}.sampling_params.{key}")
    checks = {"temperature": lambda v: _number(v) and 0 <= v <= 2, "top_p": lambda v: _number(v) and 0 < v <= 1,
              "max_completions_tokens": lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 4096,
              "seed": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "reasoning_effort": lambda v: isinstance(v, str)}
    wants = {"temperature": "a number in [0, 2]", "top_p": "a number in (0, 1]",
             "max_completions_tokens": "an integer in [1, 4096]", "seed": "an integer", "reasoning_effort": "a string"}
    for key, value in sampling.items():
        if value is not None and not checks[key](value):
            raise GraderError(f"must be {wants[key]}", f"{param}.sampling_params.{key}")


def _content_texts(content: Any, param: str) -> list[tuple[str, str]]:
    """(text, param) of each text part of a message's content: a string, a part or a list of parts."""
    if isinstance(content, str):
        return [(content, param)]
    parts = content if isinstance(content, list) else [content]
    if not parts:
        raise GraderError("must not be empty", param)
    out = []
    for i, part in enumerate(parts):
        where = f"{param}.{i}" if isinstance(content, list) else param
        if isinstance(part, str):
            out.append((part, where))
            continue
        if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else None
            raise GraderError(f"{kind!r} content is not supported (text only: a string, or "
                              f"{{\"type\": \"input_text\", \"text\": ...}})", where)
        out.append((part["text"], where))
    return out


# --- templates --------------------------------------------------------------------------------------

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
    """(top-level item field, param of the template) for every `{{item.<field>...}}` in a valid grader.
    A python grader reads the item in code: its fields are not known."""
    return [(ref[1], param) for param, template in _templates(spec, "grader")
            for ref in template_refs(template, param) if ref[0] == "item"]


def model_refs(spec: Any, param: str = "grader") -> list[tuple[str, str]]:
    """(model, param of the field) of every score_model grader in `spec` (tolerant of invalid specs)."""
    if not isinstance(spec, dict):
        return []
    if spec.get("type") == "multi" and isinstance(spec.get("graders"), dict):
        return [r for name, sub in spec["graders"].items() for r in model_refs(sub, f"{param}.graders.{name}")]
    if spec.get("type") == "score_model" and isinstance(spec.get("model"), str):
        return [(spec["model"], f"{param}.model")]
    return []


def kinds(spec: dict[str, Any]) -> set[str]:
    """The grader types used in a valid grader, `multi`'s members included."""
    if spec["type"] == "multi":
        return {"multi"}.union(*(kinds(sub) for sub in spec["graders"].values()))
    return {spec["type"]}


def _templates(spec: dict[str, Any], param: str) -> list[tuple[str, str]]:
    kind = spec.get("type")
    if kind == "multi":
        return [t for name, sub in spec["graders"].items() for t in _templates(sub, f"{param}.graders.{name}")]
    if kind == "score_model":
        return [(where, text) for i, m in enumerate(spec["input"])
                for text, where in _content_texts(m["content"], f"{param}.input.{i}.content")]
    return [(f"{param}.{k}", spec[k]) for k in ("input", "reference") if isinstance(spec.get(k), str)]


def episode_sample(final_text: str, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The `sample` of a multi-turn episode: OpenAI's `output_text` / `output_json` read the final assistant
    turn and `output_tools` lists every tool call of the episode (OpenAI's `{"id", "type": "function",
    "function": {"name", "arguments"}}`, arguments as a JSON string); Keel's `messages` is the transcript
    after the prompt (assistant turns with their `tool_calls`, tool results), rendered as JSON."""
    calls = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for i, call in enumerate(message.get("tool_calls") or []):
            fn = call.get("function") if isinstance(call.get("function"), dict) else call
            arguments = fn.get("arguments", {})
            calls.append({"id": call.get("id") or f"call_{len(calls)}_{i}", "type": "function",
                          "function": {"name": fn.get("name"), "arguments": arguments if isinstance(arguments, str)
                                       else json.dumps(arguments, ensure_ascii=False)}})
    try:
        output_json = json.loads(final_text)
    except ValueError:
        output_json = None
    return {"output_text": final_text, "output_json": output_json, "output_tools": calls,
            "messages": [dict(m) for m in messages]}


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


def render_messages(spec: dict[str, Any], sample: dict[str, Any], item: dict[str, Any],
                    param: str = "grader") -> list[dict[str, str]]:
    """A score_model grader's `input` as chat messages (`role`, `content` text), templates filled;
    `developer` becomes `system` (chat templates know that role)."""
    out = []
    for i, message in enumerate(spec["input"]):
        where = f"{param}.input.{i}.content"
        text = "".join(render(t, sample, item, p) for t, p in _content_texts(message["content"], where))
        out.append({"role": "system" if message["role"] == "developer" else message["role"], "content": text})
    return out


def score_range(spec: dict[str, Any]) -> tuple[float, float]:
    low, high = spec.get("range") or (0.0, 1.0)
    return float(low), float(high)
