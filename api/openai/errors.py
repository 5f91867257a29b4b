"""OpenAI's error object beside RFC 9457: what the official `openai` client needs to raise the right
exception class (`BadRequestError` 400, `AuthenticationError` 401, `NotFoundError` 404,
`RateLimitError` 429) with `param` and `code` set.

On the OpenAI-compatible routes (`/v1/fine_tuning/...`, `/v1/chat/completions`, `/v1/completions`) every problem body also carries
`{"error": {"message", "type", "param", "code"}}` as an RFC 9457 extension member, and request
validation problems are 400s (OpenAI's status) instead of Keel's 422. A `purpose=fine-tune` upload's
file problems get the same treatment (api/routes/files.py).

Nothing here imports the rest of `api`: `api.errors` renders every problem through `with_error`.
"""

from __future__ import annotations

from typing import Any

OPENAI_PREFIXES = ("/v1/fine_tuning", "/v1/chat/completions", "/v1/completions", "/v1/trajectories")
SHARED_PREFIXES = ("/v1/models", "/v1/files")
"""Keel routes the official client calls too (`models.list`, `files.create`): their problems keep Keel's
status (Keel's own clients read them) and gain the `error` member."""
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 409: "invalid_request_error", 422: "invalid_request_error",
          429: "rate_limit_error"}


def error_object(status: int, code: str, message: str, param: str | None) -> dict[str, Any]:
    return {"message": message, "type": _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
            "param": param, "code": code}


def is_openai_path(path: str) -> bool:
    return path.startswith(OPENAI_PREFIXES)


def is_shared_path(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in SHARED_PREFIXES)


def with_error(path: str, status: int, content: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(status, body) of a problem at `path`: adapted on OpenAI routes, `error` added on shared ones."""
    if is_openai_path(path):
        return adapt(status, content)
    if is_shared_path(path) and "error" not in content:
        return status, {**content, "error": error_object(status, content.get("code") or "error",
                                                          content.get("detail") or "", content.get("param"))}
    return status, content


def adapt(status: int, content: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(status, body) of a problem on an OpenAI-compatible route: 422 -> 400, plus `error`."""
    if status == 422:
        status = 400
        content = {**content, "status": 400, "title": "Bad Request"}
    return status, {**content, "error": error_object(status, content.get("code") or "error",
                                                      content.get("detail") or "", content.get("param"))}
