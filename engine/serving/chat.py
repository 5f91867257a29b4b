"""Chat prompts and tool calls: OpenAI messages through the model's chat template (tools included), and
Hermes/Qwen `<tool_call>{json}</tool_call>` blocks in a completion parsed back into OpenAI `tool_calls`."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
TOOL_OPEN = "<tool_call>"


class PromptError(ValueError):
    """A request the template cannot render (names the OpenAI parameter)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _text(content: Any) -> str:
    """OpenAI content: a string, or a list of parts of which the text ones count."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise PromptError("message content must be a string or a list of parts", "messages")


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates expect them: text content, tool-call arguments as objects."""
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": m.get("role"), "content": _text(m.get("content"))}
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                fn = dict(call.get("function") or {})
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        fn["arguments"] = json.loads(args) if args.strip() else {}
                    except ValueError:
                        pass  # a template may print it as the string it is
                calls.append({"id": call.get("id"), "type": "function", "function": fn})
            msg["tool_calls"] = calls
        for key in ("name", "tool_call_id"):
            if m.get(key) is not None:
                msg[key] = m[key]
        out.append(msg)
    return out


def render(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    """Prompt token ids: the template with the generation prompt, its own special tokens only."""
    if not getattr(tokenizer, "chat_template", None):
        raise PromptError("this model has no chat template: use /v1/completions", "messages")
    kwargs = {"tools": tools} if tools else {}
    try:
        text = tokenizer.apply_chat_template(template_messages(messages), tokenize=False, add_generation_prompt=True,
                                             **kwargs)
    except Exception as e:  # a template's own raise_exception, or a message shape it does not take
        raise PromptError(f"the model's chat template refused the messages: {type(e).__name__}", "messages") from e
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content outside the tool-call blocks or None when empty, OpenAI `tool_calls`). A block whose
    JSON does not parse, or has no name, stays in the content."""
    calls, kept, last = [], [], 0
    for match in TOOL_CALL.finditer(text):
        try:
            body = json.loads(match.group(1))
        except ValueError:
            continue
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            continue
        args = body.get("arguments", body.get("parameters", {}))
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": body["name"],
                                   "arguments": args if isinstance(args, str) else json.dumps(args)}})
        kept.append(text[last:match.start()])
        last = match.end()
    kept.append(text[last:])
    content = "".join(kept).strip() if calls else text
    return (content or None), calls
