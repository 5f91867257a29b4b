"""Tool calls as the model writes them, and tool results as chat messages.

Format `hermes` (Hermes / Qwen2.5 / Qwen3 templates): each call is a JSON object between tags,

    <tool_call>{"name": "calculator", "arguments": {"expression": "3 + 4"}}</tool_call>

anywhere in the assistant's text, several per turn allowed. `arguments` may also be a JSON string
holding the object (OpenAI's wire shape). A block that cannot be read (bad JSON, no `name`, arguments
that are not an object, an unterminated `<tool_call>`) is still a call: it is answered with an error
message so the model sees what went wrong, and it counts in `Step.tool_errors`.

A result is a `tool` message (`{"role": "tool", "name": ..., "content": ...}`): the chat template
renders it (Qwen: a `<tool_response>` in a user turn; the demo template: a `Tool: ...` line).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("hermes",)
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(_OPEN) + r"(.*?)(?:" + re.escape(_CLOSE) + r"|$)", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One call parsed from the text: `name` and `arguments`, or `error` when it could not be read
    (then `name` is what could be recovered, possibly empty)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def parse_tool_calls(text: str, tool_format: str = "hermes") -> list[ToolCall]:
    """Every call in `text`, in order (empty: the turn made no call)."""
    if tool_format not in FORMATS:
        raise ValueError(f"unknown tool format {tool_format!r} (one of {', '.join(FORMATS)})")
    calls = []
    for match in _BLOCK.finditer(text):
        closed = match.group(0).endswith(_CLOSE)
        calls.append(_read(match.group(1).strip()) if closed else
                     ToolCall("", error=f"unterminated {_OPEN}: the call must end with {_CLOSE}"))
    return calls


def _read(body: str) -> ToolCall:
    try:
        data = json.loads(body)
    except ValueError as e:
        return ToolCall("", error=f"the tool call is not valid JSON ({e.msg} at position {e.pos})")
    if not isinstance(data, dict):
        return ToolCall("", error='the tool call must be a JSON object {"name": ..., "arguments": {...}}')
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall("", error='the tool call has no "name"')
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI's shape: the arguments object as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return ToolCall(name, error=f'the "arguments" of {name} are not valid JSON')
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ToolCall(name, error=f'the "arguments" of {name} must be a JSON object')
    return ToolCall(name, arguments)


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """`name(arguments)` written the way `parse_tool_calls` reads it (prompts, examples, tests)."""
    return f"{_OPEN}{json.dumps({'name': name, 'arguments': arguments})}{_CLOSE}"


def tool_message(name: str, content: str) -> dict[str, Any]:
    """A tool's result as a chat message."""
    return {"role": "tool", "name": name, "content": content}


def error_message(name: str, error: str) -> dict[str, Any]:
    """A call answered with an error (the episode goes on: the model may correct itself)."""
    return tool_message(name or "error", f"Error: {error}")


def openai_tool_calls(calls: list[ToolCall]) -> list[dict[str, Any]]:
    """The readable calls in OpenAI's message shape (`tool_calls` of an assistant message in a transcript)."""
    return [{"type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in calls if c.error is None]
