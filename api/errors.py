"""RFC 9457 problem+json for every error, with Keel's `code`, `param` and `request_id`."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from api.openai import errors as openai_errors

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
_TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 409: "Conflict", 413: "Content Too Large",
           415: "Unsupported Media Type", 422: "Unprocessable Content", 429: "Too Many Requests",
           500: "Internal Server Error", 503: "Service Unavailable"}


class Problem(BaseModel):
    """An RFC 9457 problem detail."""

    type: str = Field(description="A URI reference naming the problem type.", examples=["/problems/not_found"])
    title: str
    status: int
    detail: str
    code: str = Field(description="Machine-readable error code.", examples=["not_found"])
    param: str | None = Field(default=None, description="The request field the problem is about.")
    request_id: str | None = None
    errors: list[dict[str, Any]] | None = Field(default=None, description="All validation errors.")


class ApiError(Exception):
    """Raise from handlers and dependencies; rendered as problem+json."""

    def __init__(self, status: int, code: str, detail: str, *, param: str | None = None,
                 headers: dict[str, str] | None = None, errors: list[dict[str, Any]] | None = None,
                 extensions: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.param = status, code, detail, param
        self.headers = headers or {}
        self.errors = errors
        self.extensions = extensions
        """Extra members of the problem body (RFC 9457 extensions), e.g. `memory_plan`."""


def not_found(kind: str, id: str, param: str | None = None) -> ApiError:
    # Another project's ids get exactly this answer too: existence is not revealed.
    return ApiError(404, "not_found", f"No {kind} with id {id!r}.", param=param)


def problem_response(request: Request, status: int, code: str, detail: str, *, param: str | None = None,
                     headers: dict[str, str] | None = None,
                     errors: list[dict[str, Any]] | None = None,
                     extensions: dict[str, Any] | None = None) -> JSONResponse:
    body = Problem(type=f"/problems/{code}", title=_TITLES.get(status, "Error"), status=status, detail=detail,
                   code=code, param=param, request_id=getattr(request.state, "request_id", None), errors=errors)
    content = {**(extensions or {}), **body.model_dump(exclude_none=True)}  # extensions never replace a member
    status, content = openai_errors.with_error(request.url.path, status, content)
    return JSONResponse(content, status_code=status, media_type=PROBLEM_JSON, headers=headers)


_MAX_PART = 100
"""A location part longer than this (a huge dict key sent by a client) is cut: errors stay small."""


def _loc_to_param(loc: tuple[Any, ...] | list[Any]) -> str | None:
    if loc and loc[0] in ("body", "query", "path", "header", "form"):  # where it was; a field may be named `path`
        loc = loc[1:]
    parts = [str(p) if len(str(p)) <= _MAX_PART else str(p)[:_MAX_PART] + "..." for p in loc]
    # Discriminated-union tags (e.g. `ppo`) name the variant, not a field.
    parts = [p for p in parts if not p.startswith("function-") and p not in _UNION_TAGS]
    return ".".join(parts) or None


_UNION_TAGS = {"sft", "reward_model", "rm_distill", "dpo", "ppo", "distill_policy", "eval"}


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path (RFC 9110: a 405's `Allow` lists them all)."""
    routes = request.app.router.routes
    return [m for m in _METHODS
            if any(r.matches({**request.scope, "method": m})[0] == Match.FULL for r in routes)]


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return problem_response(request, exc.status, exc.code, exc.detail, param=exc.param,
                                headers=exc.headers, errors=exc.errors, extensions=exc.extensions)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        param = _loc_to_param(first.get("loc", ()))
        code = "unknown_parameter" if first.get("type") == "extra_forbidden" else "invalid_request"
        detail = f"{param}: {first.get('msg')}" if param else str(first.get("msg", "invalid request"))
        clean = [{"param": _loc_to_param(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")}
                 for e in errors[:20]]
        return problem_response(request, 422, code, detail, param=param, errors=clean)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(exc.status_code, "http_error")
        headers = getattr(exc, "headers", None)
        if exc.status_code == 400 and isinstance(exc.__cause__, ValueError | RecursionError):
            # FastAPI's answer to a JSON body it cannot decode (not UTF-8, nested too deep); invalid JSON
            # is a 422 already.
            return problem_response(request, 422, "invalid_request", "The request body is not valid JSON.")
        if exc.status_code == 405:  # Starlette names the first matching route's methods only
            headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
        return problem_response(request, exc.status_code, code, str(exc.detail), headers=headers)

    @app.exception_handler(OperationalError)
    async def _db_down(request: Request, exc: OperationalError):
        log.warning("database unavailable: %s", exc.orig)
        return problem_response(request, 503, "database_unavailable",
                                "The database is unavailable; retry shortly.", headers={"Retry-After": "5"})

    @app.exception_handler(DBAPIError)
    async def _db_error(request: Request, exc: DBAPIError):
        if exc.connection_invalidated:
            return problem_response(request, 503, "database_unavailable",
                                    "The database connection was lost; retry shortly.", headers={"Retry-After": "5"})
        log.exception("database error")
        return problem_response(request, 500, "internal_error", "An internal error occurred.")

    @app.exception_handler(Exception)
    async def _unhandled(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        # This handler runs outside the request-id middleware, so the header is set here.
        rid = getattr(request.state, "request_id", None)
        return problem_response(request, 500, "internal_error", "An internal error occurred.",
                                headers={"X-Request-ID": rid} if rid else None)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries declaring problem+json bodies."""
    return {s: {"model": Problem, "description": _TITLES.get(s, "Error"),
                "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
            for s in statuses}
