"""OpenAI's completion shapes on the engine side: a forwarded request body (docs/inference.md) read
into a `GenerationRequest`, and the engine's deltas written back as `chat.completion` /
`text_completion` objects or their SSE chunks, with OpenAI's error object for what it refuses."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from engine.rollout.sampling import row_seed
from engine.serving.chat import TOOL_OPEN, PromptError, parse_tool_calls, render
from engine.serving.engine import Delta, GenerationRequest


class ServingError(Exception):
    """An OpenAI-shaped error answer (`status`, `{"error": {message, type, param, code}}`)."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type_: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type_

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class Prepared:
    """A request ready to run: what to generate and how to answer."""

    chat: bool
    request: GenerationRequest
    model: str
    logprobs: bool
    tools: bool
    stream: bool
    include_usage: bool
    return_token_ids: bool
    trajectory_id: str | None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ServingError(400, f"{name} must be a number from {low} to {high}", param=name, code="invalid_value")
    return float(value)


def _int(body: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ServingError(400, f"{name} must be an integer from {low} to {high}", param=name, code="invalid_value")
    return value


def prepare(body: dict[str, Any], chat: bool, tokenizer: Any, engine_max_len: int) -> Prepared:
    keel = body.get("keel") or {}
    max_len = min(int(keel.get("max_model_len") or engine_max_len), engine_max_len)
    tools = body.get("tools") if body.get("tool_choice") != "none" else None
    where = "messages" if chat else "prompt"
    try:
        if chat:
            if not isinstance(body.get("messages"), list) or not body["messages"]:
                raise ServingError(400, "messages must be a non-empty list", param="messages", code="invalid_value")
            prompt_ids = render(tokenizer, body["messages"], tools)
        else:
            prompt_ids = _completion_prompt(body.get("prompt"), tokenizer)
    except PromptError as e:
        raise ServingError(400, str(e), param=e.param, code="invalid_value") from e
    room = max_len - len(prompt_ids)
    asked = _int(body, "max_completion_tokens", 1, 1 << 30) or _int(body, "max_tokens", 1, 1 << 30)
    if room < 1 or (asked is not None and asked > room):
        raise ServingError(400, f"this model's context is {max_len} tokens: the prompt has {len(prompt_ids)}"
                           + (f" and {asked} were asked for the completion" if asked else ""),
                           param=where, code="context_length_exceeded")
    n = _int(body, "n", 1, 128) or 1
    seed = _int(body, "seed", -(1 << 63), (1 << 64) - 1)
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > 4:
        raise ServingError(400, "stop must be a string or up to 4 non-empty strings", param="stop",
                           code="invalid_value")
    if chat:
        logprobs = bool(body.get("logprobs"))
        top = _int(body, "top_logprobs", 0, 20) or 0
        if top and not logprobs:
            raise ServingError(400, "top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value")
    else:
        top = _int(body, "logprobs", 0, 5)
        logprobs, top = top is not None, top or 0
    request = GenerationRequest(
        prompt_ids=list(prompt_ids), max_tokens=asked or room, seeds=[row_seed(seed, k) for k in range(n)],
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0), top_p=_number(body, "top_p", 1.0, 0.0, 1.0) or 1.0,
        stop=stop, top_logprobs=top, adapter=keel.get("adapter"))
    return Prepared(chat=chat, request=request, model=str(keel.get("model_name") or body.get("model") or ""),
                    logprobs=logprobs, tools=bool(tools), stream=bool(body.get("stream")),
                    include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
                    return_token_ids=bool(keel.get("return_token_ids")), trajectory_id=keel.get("trajectory_id"))


def _completion_prompt(prompt: Any, tokenizer: Any) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return tokenizer(prompt)["input_ids"]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if not all(0 <= t < len(tokenizer) for t in prompt):
            raise PromptError("prompt token ids must be in the model's vocabulary", "prompt")
        return prompt
    raise PromptError("prompt must be one non-empty string or one list of token ids", "prompt")


class _Choice:
    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.entries: list[dict[str, Any]] = []
        self.text = ""
        self.finish: str | None = None
        self.sent = 0  # chat streaming with tools: content characters already streamed


def _token_entry(tokenizer: Any, delta: Delta) -> dict[str, Any]:
    def one(token_id: int, logprob: float) -> dict[str, Any]:
        text = tokenizer.decode([token_id])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    return {**one(delta.token_id, delta.logprob), "top_logprobs": [one(t, lp) for t, lp in delta.top]}


def _usage(p: Prepared, choices: list[_Choice]) -> dict[str, int]:
    completion = sum(len(c.tokens) for c in choices)
    prompt = len(p.request.prompt_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion_logprobs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    offsets, at = [], 0
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets}


def _extras(p: Prepared, out: dict[str, Any], choices: list[_Choice]) -> dict[str, Any]:
    if p.return_token_ids:
        out["prompt_token_ids"] = p.request.prompt_ids
        for shaped, c in zip(out["choices"], choices):
            shaped["token_ids"] = c.tokens
    if p.trajectory_id:
        out["keel"] = {"trajectory_id": p.trajectory_id, "prompt_token_ids": p.request.prompt_ids,
                       "choices": [{"token_ids": c.tokens, "logprobs": c.logprobs} for c in choices]}
    return out


async def complete(engine: Any, p: Prepared) -> dict[str, Any]:
    """Run to the end; the `chat.completion` or `text_completion` object."""
    choices = [_Choice() for _ in range(p.request.n)]
    async for d in engine.generate(p.request):
        _collect(engine.tokenizer, p, choices[d.index], d)
    shaped = []
    for i, c in enumerate(choices):
        if p.chat:
            content, calls = parse_tool_calls(c.text) if p.tools else (c.text, [])
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            shaped.append({"index": i, "message": message,
                           "logprobs": {"content": c.entries} if p.logprobs else None,
                           "finish_reason": "tool_calls" if calls else c.finish})
        else:
            shaped.append({"index": i, "text": c.text, "finish_reason": c.finish,
                           "logprobs": _completion_logprobs(c.entries) if p.logprobs else None})
    out = {"id": ("chatcmpl-" if p.chat else "cmpl-") + p.id, "object": "chat.completion" if p.chat else
           "text_completion", "created": p.created, "model": p.model, "choices": shaped,
           "usage": _usage(p, choices), "system_fingerprint": None}
    return _extras(p, out, choices)


def _collect(tokenizer: Any, p: Prepared, c: _Choice, d: Delta) -> None:
    c.tokens.append(d.token_id)
    c.logprobs.append(d.logprob)
    c.text += d.text
    if p.logprobs:
        c.entries.append(_token_entry(tokenizer, d))
    c.finish = d.finish_reason or c.finish


def sse(payload: dict[str, Any] | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


async def stream(engine: Any, p: Prepared) -> AsyncIterator[str]:
    """SSE lines: chunks as tokens arrive, the usage chunk if asked, `[DONE]`. Errors raise: the
    caller turns them into an error event (the status line is already sent)."""
    choices = [_Choice() for _ in range(p.request.n)]
    base = {"id": ("chatcmpl-" if p.chat else "cmpl-") + p.id,
            "object": "chat.completion.chunk" if p.chat else "text_completion", "created": p.created,
            "model": p.model, "system_fingerprint": None}

    def chunk(index: int, body: dict[str, Any], finish: str | None, logprobs: Any = None) -> str:
        choice = {"index": index, **body, "logprobs": logprobs, "finish_reason": finish}
        out = {**base, "choices": [choice]}
        if p.return_token_ids and index == 0 and not choices[0].tokens:
            out["prompt_token_ids"] = p.request.prompt_ids
        if p.return_token_ids and finish is not None:
            choice["token_ids"] = choices[index].tokens
        return sse(out)

    if p.chat:
        for i in range(p.request.n):
            yield chunk(i, {"delta": {"role": "assistant", "content": ""}}, None)
    async for d in engine.generate(p.request):
        c = choices[d.index]
        _collect(engine.tokenizer, p, c, d)
        entry = c.entries[-1:] if p.logprobs else None
        if not p.chat:
            yield chunk(d.index, {"text": d.text}, d.finish_reason,
                        _completion_logprobs(entry) if entry is not None else None)
            continue
        text = d.text
        if p.tools:  # content only up to a possible tool call; the calls go out whole at the end
            safe = c.text.find(TOOL_OPEN)
            limit = len(c.text) if safe < 0 else safe
            if d.finish_reason is None:
                limit = min(limit, _open_prefix_start(c.text))
            text, c.sent = c.text[c.sent:max(limit, c.sent)], max(limit, c.sent)
        logprobs = {"content": entry} if entry is not None else None
        if d.finish_reason is None:
            yield chunk(d.index, {"delta": {"content": text}}, None, logprobs)
            continue
        calls = parse_tool_calls(c.text)[1] if p.tools else []
        delta: dict[str, Any] = {"content": text} if text else {}
        if calls:
            delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(calls)]
        yield chunk(d.index, {"delta": delta}, "tool_calls" if calls else d.finish_reason, logprobs)
    if p.include_usage:
        yield sse({**base, "choices": [], "usage": _usage(p, choices)})
    if p.trajectory_id:
        yield sse({**base, "choices": [], "keel": _extras(p, {"choices": [{} for _ in choices]}, choices)["keel"]})
    yield sse("[DONE]")


def _open_prefix_start(text: str) -> int:
    """Where a tail of `text` that may begin `<tool_call>` starts (len(text) when none)."""
    for n in range(min(len(TOOL_OPEN) - 1, len(text)), 0, -1):
        if text.endswith(TOOL_OPEN[:n]):
            return len(text) - n
    return len(text)
