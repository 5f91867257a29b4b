"""OpenAI's `/v1/chat/completions` and `/v1/completions` for every model Keel holds: the request is
checked here (the caller's key and project, the schema of api/openai/completion_requests.py, the
deployment's limits), its `model` resolved to base weights plus an optional LoRA adapter (a project
serves only its own models and the shared base models), and forwarded to Ray Serve's HTTP ingress
(`KEEL_SERVE_URL`) with httpx; the answer, or its server-sent events, comes back as Serve wrote it.
The contract with Serve and what each side does: docs/inference.md. This process never imports torch
or Ray: the tokenizer lives in Serve, so token counts (the tokens-per-minute limit) come from the
`usage` Serve returns.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ValidationError

from api import ratelimit
from api.deps import CurrentCaller
from api.errors import ApiError, problem_responses
from api.openai import inference_metrics as metrics
from api.openai.completion_requests import ChatCompletionCreate, CompletionCreate
from api.openai.targets import Target, resolve_target
from core import trajectories
from core.config import settings
from core.db import session_scope

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", tags=["inference"])

TIMEOUT = httpx.Timeout(connect=5.0, read=600.0, write=60.0, pool=60.0)
"""A completion may decode for minutes; reaching Serve may not take long."""
_CLIENTS: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
_MID_STREAM_ERROR = {"message": "The model server stopped answering mid-stream; retry the request.",
                           "type": "server_error", "param": None, "code": "model_unavailable"}
_TOKENS = ratelimit.RateLimiter(settings.REDIS_URL or None, prefix="keel:inference-tokens")
"""Tokens per minute per key (`KEEL_INFERENCE_TOKENS_PER_MINUTE`), beside the requests budget."""


def _client() -> httpx.AsyncClient:
    """One pooled client per event loop (a client's connections belong to the loop that opened them)."""
    loop = asyncio.get_running_loop()
    client = _CLIENTS.get(loop)
    if client is None:
        # trust_env off: a proxy variable must never send completions off the host.
        client = _CLIENTS[loop] = httpx.AsyncClient(timeout=TIMEOUT, trust_env=False,
                                                    limits=httpx.Limits(max_connections=1000))
    return client


# -- routes ----------------------------------------------------------------------------------------------

_RESPONSES = problem_responses(400, 401, 404, 429, 503)


@router.post("/chat/completions", summary="Create a chat completion", responses=_RESPONSES)
async def create_chat_completion(raw: dict[str, Any], request: Request, caller: CurrentCaller):
    """OpenAI's `chat.completions.create` on any model the project can use (`GET /v1/models`): a base
    model under the deployment's model roots, a Keel model id, an `ft:` name, a checkpoint id or a
    `tinker://` sampler path. `extra_body` may add `return_token_ids` and `trajectory_id`
    (docs/inference.md). `stream: true` answers server-sent events ending with `data: [DONE]`."""
    body = _parse(ChatCompletionCreate, raw)
    if body.top_logprobs is not None and not body.logprobs:
        raise _invalid("top_logprobs", "top_logprobs needs logprobs: true.")
    if body.tool_choice not in (None, "none", "auto") and not body.tools:
        raise _invalid("tool_choice", "tool_choice names a tool, but the request has no tools.")
    return await _complete(request, caller, body, "chat/completions")


@router.post("/completions", summary="Create a completion", responses=_RESPONSES)
async def create_completion(raw: dict[str, Any], request: Request, caller: CurrentCaller):
    """OpenAI's legacy `completions.create`: one prompt (a string or its token ids) continued as it is,
    without a chat template. Same models, limits and extras as chat completions."""
    return await _complete(request, caller, _parse(CompletionCreate, raw), "completions")


# -- checks ------------------------------------------------------------------------------------------------

def _parse(schema: type[BaseModel], raw: dict[str, Any]) -> Any:
    try:
        return schema.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        loc = [str(p) for p in first["loc"] if not _union_member(str(p))]
        param = ".".join(loc) or None
        code = "unknown_parameter" if first["type"] == "extra_forbidden" else "invalid_value"
        detail = (f"Unrecognized request argument supplied: {param}." if code == "unknown_parameter"
                  else f"{param}: {first['msg']}")
        raise ApiError(400, code, detail, param=param) from None


def _union_member(part: str) -> bool:
    # Location parts pydantic adds for the members of a union (`stop.str`, `prompt.list[int]`): not fields.
    return part in ("str", "int", "bool", "float", "ToolChoiceFunction") or part.startswith(
        ("list[", "literal[", "function-", "constrained-"))


def _invalid(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, code, message, param=param)


def _check_limits(body: Any, target: Target) -> None:
    """The deployment's caps, then the model's context window (the prompt's length Serve checks: only
    it can tokenize)."""
    if body.n > settings.INFERENCE_MAX_N:
        raise _invalid("n", f"n is {body.n}; this deployment allows at most {settings.INFERENCE_MAX_N} "
                       "choices per request (KEEL_INFERENCE_MAX_N).")
    cap, field = body.generation_cap()
    if cap is not None and cap > settings.INFERENCE_MAX_TOKENS:
        raise _invalid(field, f"{field} is {cap}; this deployment allows at most {settings.INFERENCE_MAX_TOKENS} "
                       "generated tokens per request (KEEL_INFERENCE_MAX_TOKENS).")
    if cap is not None and target.max_model_len is not None and cap >= target.max_model_len:
        raise _invalid(field, f"This model's maximum context length is {target.max_model_len} tokens; {field} "
                       f"({cap}) leaves no room for the prompt.", code="context_length_exceeded")


async def _admit_tokens(key_id: str) -> None:
    limit = settings.INFERENCE_TOKENS_PER_MINUTE
    if limit <= 0:
        return
    budget = await anyio.to_thread.run_sync(lambda: _TOKENS.check(key_id, limit, count=False))
    if budget is not None and not budget.allowed:
        raise ApiError(429, "rate_limited", "This API key used its tokens per minute "
                       f"({settings.INFERENCE_TOKENS_PER_MINUTE}, KEEL_INFERENCE_TOKENS_PER_MINUTE); retry later.",
                       headers=budget.headers())


# -- forwarding ---------------------------------------------------------------------------------------------

def _upstream_body(body: Any, target: Target) -> dict[str, Any]:
    payload = body.model_dump(exclude_none=True, exclude={"return_token_ids", "trajectory_id", "user"})
    if body.stream:  # usage always, for the tokens-per-minute count; dropped when the caller did not ask
        payload["stream_options"] = {"include_usage": True}
    payload["keel"] = {"base_model": target.base_model, "adapter": target.adapter, "model_name": body.model,
                       "max_model_len": target.max_model_len, "trajectory_id": body.trajectory_id,
                       "return_token_ids": body.return_token_ids}
    return payload


async def _complete(request: Request, caller: CurrentCaller, body: Any, endpoint: str):
    project_id = caller.project.id
    target = await anyio.to_thread.run_sync(resolve_target, project_id, body.model)
    _check_limits(body, target)
    await _admit_tokens(caller.key_id)
    url = f"{settings.SERVE_URL.rstrip('/')}/v1/{endpoint}"
    headers = {"X-Request-ID": getattr(request.state, "request_id", None) or ""}
    call = metrics.Call(target.label, endpoint)
    upstream_request = _client().build_request("POST", url, json=_upstream_body(body, target), headers=headers)
    relaying = False
    try:
        try:
            upstream = await _client().send(upstream_request, stream=True)
        except httpx.TransportError as exc:
            call.finish("unavailable")
            log.warning("serve unreachable at %s: %s", url, exc.__class__.__name__)
            raise ApiError(503, "serve_unavailable", "The model server is not reachable; retry shortly.",
                           headers={"Retry-After": "5"}) from None
        if upstream.status_code >= 400:
            content = await upstream.aread()
            await upstream.aclose()
            raise _upstream_error(upstream.status_code, content)
        if body.stream:
            relaying = True  # the relay closes the upstream and records the call however the stream ends
            return StreamingResponse(_relay(upstream, call, caller, body),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            answer = json.loads(await upstream.aread())
        except (httpx.HTTPError, ValueError):
            raise ApiError(503, "model_unavailable", "The model server failed to answer; retry shortly.",
                           headers={"Retry-After": "5"}) from None
        finally:
            await upstream.aclose()
        if not isinstance(answer, dict):
            raise ApiError(503, "model_unavailable", "The model server failed to answer; retry shortly.",
                           headers={"Retry-After": "5"})
        extras = answer.pop("keel", None)
        usage = answer.get("usage") or {}
        call.finish("ok", usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
    finally:
        if not relaying:
            call.finish("error")  # no-op once finished; else a refusal, or a client gone mid-wait
    await _after(caller, body, usage, extras)
    return JSONResponse(answer)


async def _relay(upstream: httpx.Response, call: metrics.Call, caller: CurrentCaller, body: Any
                 ) -> AsyncIterator[bytes]:
    """Serve's events passed on, each re-encoded: Keel's `keel` member and the usage chunk the caller
    did not ask for taken out. An upstream that dies mid-stream ends it with one error event."""
    want_usage = bool(body.stream_options and body.stream_options.include_usage)
    usage: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    outcome = "error"
    settled = False
    try:
        async for line in upstream.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                outcome = "ok"
                # Recorded before the caller sees the end: its next call may read the trajectory.
                call.finish(outcome, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
                with anyio.CancelScope(shield=True):
                    await _after(caller, body, usage, extras or None)
                settled = True
                yield b"data: [DONE]\n\n"
                break
            chunk = json.loads(data)
            if "error" in chunk:
                yield _event(chunk)
                break
            carried = chunk.pop("keel", None)
            _merge_extras(extras, carried)
            if carried is not None and not chunk.get("choices") and not chunk.get("usage"):
                continue  # a chunk that only carried Keel's record
            if chunk.get("usage"):
                usage = chunk["usage"]
                if not chunk.get("choices") and not want_usage:
                    continue
                if not want_usage:
                    chunk.pop("usage")
            if any(_has_output(c) for c in chunk.get("choices") or ()):
                call.first_token()
            yield _event(chunk)
        else:
            yield _event({"error": _MID_STREAM_ERROR})
    except (httpx.HTTPError, ValueError) as exc:
        log.warning("serve stream broke: %s", exc.__class__.__name__)
        yield _event({"error": _MID_STREAM_ERROR})
    finally:
        with anyio.CancelScope(shield=True):  # a client gone mid-stream still used its tokens
            await upstream.aclose()
            if not settled:
                call.finish(outcome, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
                await _after(caller, body, usage, extras or None)


def _event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def _has_output(choice: dict[str, Any]) -> bool:
    delta = choice.get("delta") or {}
    return bool(choice.get("text") or delta.get("content") or delta.get("tool_calls"))


def _merge_extras(into: dict[str, Any], extras: dict[str, Any] | None) -> None:
    """Streaming: the `keel` members of several chunks, choices merged by index."""
    if not extras:
        return
    if extras.get("prompt_token_ids") is not None:
        into["prompt_token_ids"] = extras["prompt_token_ids"]
    by_index = {c["index"]: c for c in into.get("choices", [])}
    for i, choice in enumerate(extras.get("choices") or ()):
        index = choice.get("index", i)
        by_index.setdefault(index, {"index": index}).update(choice)
    into["choices"] = [by_index[i] for i in sorted(by_index)]


async def _after(caller: CurrentCaller, body: Any, usage: dict[str, Any], extras: dict[str, Any] | None) -> None:
    """What a finished call leaves: its tokens counted against the key, its trajectory recorded."""
    total = int(usage.get("total_tokens") or 0)
    if total and settings.INFERENCE_TOKENS_PER_MINUTE > 0:
        await anyio.to_thread.run_sync(_TOKENS.spend, caller.key_id, settings.INFERENCE_TOKENS_PER_MINUTE, total)
    if body.trajectory_id and extras and extras.get("choices"):
        await anyio.to_thread.run_sync(_record, caller.project.id, body, extras)


def _record(project_id: str, body: Any, extras: dict[str, Any]) -> None:
    choices = [{"index": c.get("index", i), **c} for i, c in enumerate(extras["choices"])]
    with session_scope() as db:
        trajectories.record(db, project_id, body.trajectory_id, body.model, extras.get("prompt_token_ids") or [],
                            choices)


def _upstream_error(status: int, content: bytes) -> ApiError:
    """Serve's OpenAI-shaped error as this room's: a 4xx as Serve put it (it names the request's
    problem), a 5xx with Keel's own words (tenants never see internal text)."""
    try:
        error = json.loads(content).get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    if not isinstance(error, dict):
        error = {}
    if 400 <= status < 500 and status != 408:
        return ApiError(status, str(error.get("code") or "invalid_request"),
                        str(error.get("message") or "The model server refused the request."),
                        param=error.get("param") if isinstance(error.get("param"), str) else None)
    log.warning("serve answered %s: %s", status, content[:500])
    return ApiError(503, "model_unavailable", "The model server failed to answer; retry shortly.",
                    headers={"Retry-After": "5"})
