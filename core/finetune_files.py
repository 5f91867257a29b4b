"""OpenAI fine-tuning JSON Lines (`purpose=fine-tune`): which of OpenAI's three layouts a file is, its
checks (errors name the line and the field), and its conversion to Keel's own dataset rows.

Layouts, told from the first row and required of every row:

- `chat` (supervised): `{"messages": [...], "tools"?: [...]}`, the last message an assistant's; an
  assistant message may carry `"weight": 0` (context only) or `1` (trained, the default).
- `preference` (dpo): `{"input": {"messages": [...]}, "preferred_output": [assistant message],
  "non_preferred_output": [assistant message]}`.
- `reinforcement`: `{"messages": [...], "tools"?: [...], ...reference fields}`, the last message not an
  assistant's; the other fields are what graders read as `{{item.<field>}}`. A row with `tools` (OpenAI
  function tools, checked) is an agentic row: an episode with the built-in `tools` environment.

Conversion (pure Python, in the API): chat -> Keel `sft` rows, one per trained assistant message, its
prompt the whole conversation before it (earlier assistant turns included as context), so the loss
covers every trained assistant turn and nothing else; preference -> `preference` rows; reinforcement
-> `prompts` rows whose `ground_truth` is the row as JSON (the grader's `item`) and, for a row with `tools`,
whose `environment` is `{"type": "tools", "tools": [...]}` (engine/environments/building.py). Tool calls, function
calls and tool results are kept as text in the message content; `tools`/`functions` definitions become
a leading system message; `developer` messages become `system` messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

FINE_TUNE = "fine-tune"
KINDS = ("chat", "preference", "reinforcement")
KEEL_PURPOSE = {"chat": "sft", "preference": "preference", "reinforcement": "prompts"}
"""The Keel dataset purpose each layout converts to."""
_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
MAX_LINE_BYTES = 64 * 1024**2
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_FUNCTION_FIELDS = {"name", "description", "parameters", "strict"}


class FormatError(Exception):
    """A bad fine-tune file: `param` is the field (`messages[2].content`), `line` 1-based."""

    def __init__(self, detail: str, *, param: str = "file", line: int | None = None, row: int | None = None,
                 code: str = "invalid_file_format") -> None:
        super().__init__(detail)
        self.detail, self.param, self.line, self.row, self.code = detail, param, line, row, code


@dataclass
class FineTuneInfo:
    kind: str
    rows: int
    columns: list[str]
    """chat: `messages`; preference: its three fields; reinforcement: `messages` + the reference
    fields present in every row (what `{{item.<field>}}` may name)."""


def records(f: BinaryIO) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(row, line, record) of each non-blank line."""
    row = line = 0
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        line += 1
        if len(raw) > MAX_LINE_BYTES:
            raise FormatError(f"Line {line} is longer than {MAX_LINE_BYTES} bytes.", line=line, row=row)
        if line == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise FormatError(f"Line {line}: invalid JSON ({e}).", line=line, row=row) from e
        except ValueError as e:  # an integer over Python's digit limit (sys.get_int_max_str_digits)
            raise FormatError(f"Line {line}: an integer has too many digits.", line=line, row=row) from e
        if not isinstance(record, dict):
            raise FormatError(f"Line {line}: expected a JSON object.", line=line, row=row)
        yield row, line, record
        row += 1


def kind_of(record: dict[str, Any]) -> str:
    if "preferred_output" in record or "non_preferred_output" in record or "input" in record:
        return "preference"
    messages = record.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict) \
            and messages[-1].get("role") == "assistant":
        return "chat"
    return "reinforcement"


def inspect(f: BinaryIO) -> FineTuneInfo:
    """Check a whole fine-tune file; raises FormatError on the first problem."""
    head = f.read(4)
    f.seek(0)
    if head == b"PAR1":
        raise FormatError("fine-tune files are JSON Lines (one JSON object per line), not parquet.")
    kind: str | None = None
    rows = 0
    reference: set[str] | None = None
    for row, line, record in records(f):
        this = kind_of(record)
        if kind is None:
            kind = this
        elif this != kind:
            raise FormatError(f"Line {line}: looks like a {this} row, but the file's first row is a {kind} "
                              "row; every row must have the same layout.", line=line, row=row)
        convert_row(kind, record, line, row)  # checks it
        if kind == "reinforcement":
            keys = {k for k in record if k != "messages"}
            reference = keys if reference is None else reference & keys
        rows = row + 1
    if kind is None:
        raise FormatError("The file has no rows.", code="empty_file")
    columns = {"chat": ["messages"], "preference": ["input", "preferred_output", "non_preferred_output"],
               "reinforcement": ["messages", *sorted(reference or ())]}[kind]
    return FineTuneInfo(kind, rows, columns)


def convert(f: BinaryIO) -> tuple[str, bytes]:
    """(layout, Keel JSON Lines bytes) of a checked fine-tune file."""
    f.seek(0)
    kind: str | None = None
    out: list[bytes] = []
    for row, line, record in records(f):
        kind = kind or kind_of(record)
        for keel_row in convert_row(kind, record, line, row):
            out.append(json.dumps(keel_row, ensure_ascii=False, sort_keys=True).encode() + b"\n")
    if kind is None:
        raise FormatError("The file has no rows.", code="empty_file")
    return kind, b"".join(out)


# --- one row ---------------------------------------------------------------------------------------

def convert_row(kind: str, record: dict[str, Any], line: int, row: int) -> list[dict[str, Any]]:
    def bad(param: str, what: str) -> FormatError:
        return FormatError(f"Line {line}, {param}: {what}.", param=param, line=line, row=row)

    if kind == "preference":
        for key in ("input", "preferred_output", "non_preferred_output"):
            if key not in record:
                raise bad(key, "missing (a dpo row has input, preferred_output and non_preferred_output)")
        if not isinstance(record["input"], dict):
            raise bad("input", "must be an object with `messages`")
        prompt = _messages(record["input"], "input.", bad)
        chosen = _output(record["preferred_output"], "preferred_output", bad)
        rejected = _output(record["non_preferred_output"], "non_preferred_output", bad)
        return [{"prompt": prompt, "chosen": chosen, "rejected": rejected}]
    messages = _messages(record, "", bad)
    if kind == "reinforcement":
        out = {"prompt": messages, "ground_truth": json.dumps(record, ensure_ascii=False, sort_keys=True)}
        if record.get("tools") is not None:  # an agentic row: an episode with the built-in tools environment
            out["environment"] = {"type": "tools", "tools": _function_tools(record["tools"], bad)}
        return [out]
    rows = []
    raw = record["messages"]
    offset = len(messages) - len(raw)  # a leading tools message shifts the indices
    for i, m in enumerate(raw):
        if m.get("role") != "assistant":
            if "weight" in m:
                raise bad(f"messages[{i}].weight", "only assistant messages carry a weight")
            continue
        weight = m.get("weight", 1)
        if weight not in (0, 1) or isinstance(weight, bool):
            raise bad(f"messages[{i}].weight", f"must be 0 or 1, got {weight!r}")
        if weight == 0:
            continue
        prompt = messages[:offset + i]
        if not any(p["content"].strip() for p in prompt):
            raise bad(f"messages[{i}]", "a trained assistant message needs a non-empty message before it")
        response = messages[offset + i]["content"]
        if not response.strip():
            raise bad(f"messages[{i}].content", "a trained assistant message must not be empty")
        rows.append({"prompt": prompt, "response": response})
    if not rows:
        raise bad("messages", "no assistant message to train on (all have weight 0)")
    return rows


def _messages(holder: dict[str, Any], prefix: str, bad) -> list[dict[str, str]]:
    raw = holder.get("messages")
    if not isinstance(raw, list) or not raw:
        raise bad(f"{prefix}messages", "must be a non-empty list of messages")
    out = []
    tools = holder.get("tools") or holder.get("functions")
    if tools is not None:
        if not isinstance(tools, list):
            raise bad(f"{prefix}tools", "must be a list")
        out.append({"role": "system", "content": "Tools: " + json.dumps(tools, ensure_ascii=False)})
    for i, m in enumerate(raw):
        out.append(_message(m, f"{prefix}messages[{i}]", bad))
    return out


def _function_tools(tools: list[Any], bad) -> list[dict[str, Any]]:
    """A reinforcement row's `tools`, checked as OpenAI's function tools (`{"type": "function", "function":
    {"name", "description"?, "parameters"?, "strict"?}}`): they become the row's `tools` environment."""
    names: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise bad(f"tools[{i}]", "must be an object {type: function, function: {name, ...}}")
        if tool.get("type") != "function":
            raise bad(f"tools[{i}].type", f"must be 'function', got {tool.get('type')!r}")
        for key in sorted(set(tool) - {"type", "function"}):
            raise bad(f"tools[{i}].{key}", "unknown field of a function tool")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise bad(f"tools[{i}].function", "must be an object with name, description, parameters")
        for key in sorted(set(fn) - _FUNCTION_FIELDS):
            raise bad(f"tools[{i}].function.{key}", f"unknown field (one of {', '.join(sorted(_FUNCTION_FIELDS))})")
        name = fn.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise bad(f"tools[{i}].function.name", "must be 1 to 64 letters, digits, _ or -")
        if name in names:
            raise bad(f"tools[{i}].function.name", f"{name!r} is defined twice")
        names.add(name)
        if "description" in fn and not isinstance(fn["description"], str):
            raise bad(f"tools[{i}].function.description", "must be a string")
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise bad(f"tools[{i}].function.parameters", "must be a JSON Schema object")
        if fn.get("strict") is not None and not isinstance(fn["strict"], bool):
            raise bad(f"tools[{i}].function.strict", "must be a boolean")
    return tools


def _message(m: Any, param: str, bad) -> dict[str, str]:
    if not isinstance(m, dict):
        raise bad(param, "must be an object with role and content")
    role = m.get("role")
    if role not in _ROLES:
        raise bad(f"{param}.role", f"must be one of {', '.join(_ROLES)}, got {role!r}")
    content = m.get("content")
    if isinstance(content, list):  # content parts: the text ones, joined
        texts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise bad(f"{param}.content[{j}]", "only {type: text, text} parts are supported")
            texts.append(part["text"])
        content = "".join(texts)
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise bad(f"{param}.content", f"must be a string, a list of text parts or null, got {type(content).__name__}")
    calls = m.get("tool_calls") or m.get("function_call")
    if calls:
        content = (content + "\n" if content else "") + json.dumps(calls, ensure_ascii=False, sort_keys=True)
    if role != "assistant" and not content.strip() and role not in ("tool", "function"):
        raise bad(f"{param}.content", "must not be empty")
    return {"role": "system" if role == "developer" else role, "content": content}


def _output(value: Any, param: str, bad) -> str:
    if not isinstance(value, list) or len(value) != 1:
        raise bad(param, "must be a list of exactly one assistant message")
    m = _message(value[0], f"{param}[0]", bad)
    if m["role"] != "assistant":
        raise bad(f"{param}[0].role", "must be assistant")
    if not m["content"].strip():
        raise bad(f"{param}[0].content", "must not be empty")
    return m["content"]
