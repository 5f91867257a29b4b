"""The request-body limit of the JSON routes (`KEEL_MAX_JSON_BODY_BYTES`).

Checked before the body is read: a `Content-Length` above the limit is a 413 at once, without
receiving a byte of the body; a body without one (chunked) or that lies about it is counted as it
arrives and refused at the first chunk over the limit, so no route ever buffers more than the limit.
Uploads (`POST /v1/files`) stream to storage with their own limit (`KEEL_MAX_UPLOAD_BYTES`).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import problem_response
from core.config import settings

UPLOAD_ROUTES = frozenset({("POST", "/v1/files")})
"""Routes that read their body as a stream with a limit of their own."""


class BodyTooLarge(HTTPException):
    """Raised from `receive` when the body passes the limit; FastAPI lets HTTP exceptions through
    its body parsing, and the handler below renders it."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"The request body is larger than the limit of {limit} bytes.")
        self.limit = limit


def _problem(request: Request, limit: int):
    return problem_response(request, 413, "request_too_large",
                            f"The request body is larger than the limit of {limit} bytes "
                            "(the deployment's KEEL_MAX_JSON_BODY_BYTES).")


class BodySizeLimit:
    """Plain ASGI (see `api.middleware`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"].rstrip("/") or "/") in UPLOAD_ROUTES:
            await self.app(scope, receive, send)
            return
        limit = settings.MAX_JSON_BODY_BYTES
        length = chunked = None
        for k, v in scope["headers"]:
            if k == b"content-length":
                length = v
            elif k == b"transfer-encoding":
                chunked = v
        if length is None and chunked is None:  # no body at all (most GETs): nothing to count
            await self.app(scope, receive, send)
            return
        if length is not None and length.strip().isdigit() and int(length) > limit:
            await _problem(Request(scope), limit)(scope, receive, send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        async def send_started(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, send_started)
        except BodyTooLarge:  # read outside a route (no handler on the way): answer here
            if started:
                raise
            await _problem(Request(scope), limit)(scope, receive, send)


def install(app: FastAPI) -> None:
    @app.exception_handler(BodyTooLarge)
    async def _too_large(request: Request, exc: BodyTooLarge):
        return _problem(request, exc.limit)

    app.add_middleware(BodySizeLimit)
