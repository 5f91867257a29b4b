"""The `tools` environment: the model calls built-in tools in its template's format
(`engine.environments.tool_calls`); each turn's calls run and their results come back as `tool`
messages; the episode ends at the first turn without a call, and the job's reward function scores that
final turn (`Step.final_reward` stays None).

Spec: `{"type": "tools", "tools": ["python", "calculator"]}`. An entry is a built-in's name, or an
OpenAI function-tool definition (`{"type": "function", "function": {"name": ...}}`, as rows of the
OpenAI reinforcement route carry them): a definition naming a built-in runs it, any other name is
declared but not runnable here and its calls are answered with a tool error. Bad calls (bad JSON, an
unknown tool, wrong arguments, a tool that raised or ran out of time) are answered with an error
message too, never raised: the model sees the error and the episode goes on.

Built-ins:
- `calculator` `{"expression": "3 * (4 + 5)"}`: arithmetic parsed with `ast` and evaluated node by node
  (numbers, + - * / // % **, parentheses); names, calls and attributes are refused, and so are powers
  and integers too large to compute quickly (`MAX_BITS`).
- `python` `{"code": "print(2 ** 10)"}`: the code runs in the `python` grader's sandbox
  (`engine.rewards.sandbox`: CPU, memory, wall-clock and disk limits, no network, a fresh process per
  call) and its printed output comes back; an exception's last line is returned as an error.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from engine.environments.base import Step
from engine.environments.tool_calls import FORMATS, ToolCall, error_message, parse_tool_calls, tool_message
from engine.errors import EngineError

log = logging.getLogger(__name__)

BUILT_INS = ("python", "calculator")
MAX_OUTPUT_CHARS = 800
"""A tool result longer than this is cut to its end (the model reads every token of it)."""
MAX_EXPRESSION_CHARS = 200
MAX_BITS = 4096
"""Largest integer (in bits) the calculator computes: about 1,200 decimal digits."""

DEFINITIONS = {
    "calculator": {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression (+ - * / // % ** and parentheses).",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}},
    "python": {"type": "function", "function": {
        "name": "python", "description": "Run Python code in a sandbox (no network); returns what it prints.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}},
}
"""The built-ins as OpenAI function definitions: what a prompt renders with `tools=` (the template's
tool list), so the model knows how to call them."""


class ToolError(Exception):
    """A call the tool refuses or could not complete: its text is what the model reads."""


# --- calculator ------------------------------------------------------------------------------------

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def calculate(expression: str) -> int | float:
    """The value of an arithmetic expression; raises `ToolError` for anything else."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ToolError(f"not an arithmetic expression ({e.msg})") from None
    try:
        return _evaluate(tree.body)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("the result is too large") from None


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _checked(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise ToolError("^ is not a power here: write ** (2 ** 3)")
    raise ToolError(f"{type(node).__name__} is not allowed: only numbers, + - * / // % ** and parentheses")


def _check_power(base: float, exponent: float) -> None:
    """Refuse an integer power before computing it when the result would be huge (10 ** 10 ** 9 would take
    minutes); a float power overflows at once (OverflowError) and needs no check."""
    if (isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0
            and base.bit_length() * exponent > MAX_BITS):
        raise ToolError("the power is too large")


def _checked(value: Any) -> int | float:
    if isinstance(value, complex):
        raise ToolError("the result is not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_BITS:
        raise ToolError("the result is too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is too large")
    return value


def format_number(value: float) -> str:
    """An int as is, a float to 12 significant digits (0.1 + 0.2 reads 0.3)."""
    return str(value) if isinstance(value, int) else format(value, ".12g")


def calculator_tool(arguments: Mapping[str, Any]) -> str:
    expression = arguments.get("expression")
    if not isinstance(expression, str) or set(arguments) - {"expression"}:
        raise ToolError('calculator takes {"expression": "<arithmetic, e.g. 3 * (4 + 5)>"}')
    return format_number(calculate(expression))


# --- python ----------------------------------------------------------------------------------------

_RUNNER = '''
import contextlib, io, json, traceback

class ToolResult(Exception):
    pass

def grade(sample, item):
    out, error = io.StringIO(), None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(compile(sample["code"], "<tool>", "exec"), {"__name__": "__main__"})
    except BaseException as e:
        error = "".join(traceback.format_exception_only(type(e), e)).strip()
    text, keep = out.getvalue(), %(keep)d
    while True:
        payload = json.dumps({"out": text[-keep:] if keep else "", "cut": len(text) > keep,
                              "error": error and error[-keep:]})
        if len(payload) <= 900 or keep == 0:
            raise ToolResult(payload)
        keep //= 2
'''
"""The sandbox grades with `grade(sample, item)` and reports a number or an error's text: the tool's output
travels back as that text (a JSON object in the `ToolResult` it raises), so the sandbox needs no change."""
_RESULT_PREFIX = "ToolResult: "
_CUT_NOTE = "[output cut to its end]\n"


class PythonTool:
    """`python` in the grader sandbox, one fresh confined process per call."""

    def __init__(self, limits: Any = None) -> None:
        from engine.rewards.sandbox import Limits

        if isinstance(limits, Mapping):
            limits = Limits.from_dict(dict(limits))
        self.limits = limits or Limits()

    def __call__(self, arguments: Mapping[str, Any]) -> str:
        from engine.rewards.sandbox import run_python

        code = arguments.get("code")
        if not isinstance(code, str) or set(arguments) - {"code"}:
            raise ToolError('python takes {"code": "<Python source; print what you want to see>"}')
        [outcome] = run_python(_RUNNER % {"keep": MAX_OUTPUT_CHARS - len(_CUT_NOTE)}, [{"code": code}], [{}],
                               self.limits)
        error = outcome.error or ""
        if not error.startswith(_RESULT_PREFIX):  # killed (time, memory) or the sandbox failed to start
            raise ToolError(error.replace("the grader process", "the code").replace("grader", "sandbox")
                            or "the code returned no output")
        try:
            result, _ = json.JSONDecoder().raw_decode(error[len(_RESULT_PREFIX):])
        except ValueError:
            raise ToolError("the code's output could not be read back") from None
        text = (_CUT_NOTE if result["cut"] else "") + result["out"]
        if result["error"]:
            raise ToolError(f"{text}{result['error']}" if text else result["error"])
        return text


# --- the environment ----------------------------------------------------------------------------------

class ToolEnvironment:
    """One episode of built-in tool use (see the module doc)."""

    def __init__(self, spec: Mapping[str, Any], context: Any) -> None:
        self.tool_format = checked_format(context)
        # Without a list: the built-ins this deployment runs (python only where it runs python code).
        allowed = getattr(context, "python_allowed", True)
        entries = spec.get("tools", [t for t in BUILT_INS if allowed or t != "python"])
        if not isinstance(entries, list | tuple) or not entries:
            raise EngineError("environment.tools must be a non-empty list", code="invalid_environment",
                              param="environment.tools")
        self.tools: dict[str, Callable[[Mapping[str, Any]], str] | None] = {}
        for entry in entries:
            name = _tool_name(entry)
            runnable = name in BUILT_INS and (name != "python" or allowed)
            self.tools[name] = self._implementation(name, context) if runnable else None

    @staticmethod
    def _implementation(name: str, context: Any) -> Callable[[Mapping[str, Any]], str]:
        if name == "python":
            return PythonTool(getattr(context, "python_limits", None))
        return calculator_tool

    @property
    def definitions(self) -> list[dict[str, Any]]:
        """The runnable tools as OpenAI function definitions (for the prompt's `tools=`)."""
        return [DEFINITIONS[name] for name, run in self.tools.items() if run is not None]

    def reset(self, row: Mapping[str, Any]) -> list[dict[str, Any]]:
        return []

    def step(self, text: str) -> Step:
        calls = parse_tool_calls(text, self.tool_format)
        if not calls:
            return Step(done=True)
        messages, errors = run_calls(calls, self.tools)
        return Step(messages=messages, tool_calls=len(calls), tool_errors=errors)

    def close(self) -> None:
        pass  # every call's sandbox process is gone when its call returns


def run_calls(calls: list[ToolCall], tools: Mapping[str, Callable[[Mapping[str, Any]], str] | None]
              ) -> tuple[list[dict[str, Any]], int]:
    """Each call's result message, in order, and how many were errors."""
    messages, errors = [], 0
    for call in calls:
        message, ok = _run_one(call, tools)
        errors += not ok
        messages.append(message)
    return messages, errors


def _run_one(call: ToolCall, tools: Mapping[str, Callable[[Mapping[str, Any]], str] | None]
             ) -> tuple[dict[str, Any], bool]:
    if call.error is not None:
        return error_message(call.name, call.error), False
    if call.name not in tools:
        return error_message(call.name, f"unknown tool {call.name!r} (available: {', '.join(tools)})"), False
    run = tools[call.name]
    if run is None:
        return error_message(call.name, f"the tool {call.name!r} cannot be run in this environment"), False
    try:
        return tool_message(call.name, _cut(run(call.arguments))), True
    except ToolError as e:
        return error_message(call.name, _cut(str(e))), False
    except Exception:  # a tool's own bug answers this call, the episode goes on
        log.exception("tool %s failed", call.name)
        return error_message(call.name, f"the tool {call.name!r} failed"), False


def _cut(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT_CHARS else "[cut]..." + text[-MAX_OUTPUT_CHARS:]


def checked_format(context: Any) -> str:
    """The context's tool-call format (`rollout.multi_turn.tool_format`), checked."""
    tool_format = getattr(context, "tool_format", "hermes")
    if tool_format not in FORMATS:
        raise EngineError(f"rollout.multi_turn.tool_format must be one of {', '.join(FORMATS)}",
                          code="invalid_config", param="rollout.multi_turn.tool_format")
    return tool_format


def _tool_name(entry: Any) -> str:
    if isinstance(entry, str):
        if entry not in BUILT_INS:
            raise EngineError(f"unknown built-in tool {entry!r} (one of {', '.join(BUILT_INS)}; other tools are "
                              "given as function definitions)", code="invalid_environment", param="environment.tools")
        return entry
    if isinstance(entry, Mapping):
        function = entry.get("function", entry)
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str) and name:
            return name
    raise EngineError("each of environment.tools is a built-in's name or a function definition with a name",
                      code="invalid_environment", param="environment.tools")
