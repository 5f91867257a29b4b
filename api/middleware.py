"""What every HTTP exchange gets around it, in one plain ASGI middleware: its request id, its
Prometheus figures, the caller's rate-limit headers, and the refusal of NUL in the path or query.

One layer rather than three: each layer wrapped `send` once more and cost every request a coroutine
call per message. Plain ASGI: BaseHTTPMiddleware would put a task and a memory stream in front of every
response body and every streamed chunk.
"""

from __future__ import annotations

import time
import uuid
from urllib.parse import parse_qsl

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import problem_response
from api.metrics import LATENCY, REQUESTS, route_label
from api.schemas.text import MESSAGE, NUL
from core import logging as logcontext


class RequestEnvelope:
    """- `request.state.request_id` (the client's `X-Request-ID` if sane, else a new one) and the
      `X-Request-ID` header on every response;
    - the `X-RateLimit-*` headers (and `Retry-After` on a refusal) of the budget authentication left in
      `request.state.rate_limit`;
    - `keel_http_requests_total` and `keel_http_request_duration_seconds` (`api.metrics`) of every
      answer: installed outermost, so 413s and 500s count too;
    - NUL (`%00`) in the path is a 404 (no id holds it) and in the query a 422 at its parameter, before
      any route runs: PostgreSQL cannot compare text holding it (request bodies: `api.schemas.text`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        rid = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-request-id"), "")
        if not rid or len(rid) > 100 or not rid.isascii():
            rid = "req_" + uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        logcontext.bind(request_id=rid)  # this request's task; handlers may add the job id
        status = 500  # nothing sent: the server answers 500

        async def enveloped(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                LATENCY.labels(scope["method"], route_label(scope)).observe(time.perf_counter() - start)
                budget = scope.get("state", {}).get("rate_limit")
                added = [] if budget is None else [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                                   for k, v in budget.headers().items()]
                added.append((b"x-request-id", rid.encode("latin-1")))
                _set_headers(message, added)
            await send(message)

        refusal = _nul_refusal(scope)
        try:
            await (refusal or self.app)(scope, receive, enveloped)
        finally:
            REQUESTS.labels(scope["method"], route_label(scope), str(status)).inc()


def _nul_refusal(scope: Scope) -> ASGIApp | None:
    """The problem response to a path or query holding NUL, else None."""
    if NUL in scope["path"]:
        return problem_response(Request(scope), 404, "not_found", "No such resource: the path holds NUL.")
    query = scope.get("query_string", b"")
    if b"%00" in query:
        for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if NUL in name or NUL in value:
                param = name.replace(NUL, "")[:100] or None
                return problem_response(Request(scope), 422, "invalid_request", f"{param}: {MESSAGE}", param=param)
    return None


def _set_headers(message: Message, added: list[tuple[bytes, bytes]]) -> None:
    """Set each (lower-case name, value) on the response start `message`, in order, as
    `MutableHeaders.__setitem__` does; appended at once when the response has none of them yet (the
    usual case: only a 429 or an error handler's response carries some already)."""
    headers = message["headers"] = list(message.get("headers", ()))
    names = {name for name, _ in added}
    if any(name in names for name, _ in headers):
        mutable = MutableHeaders(scope=message)
        for name, value in added:
            mutable[name.decode("latin-1")] = value.decode("latin-1")
    else:
        headers.extend(added)
