"""Log lines as text or JSON (`KEEL_LOG_FORMAT`), each carrying the request id and the job id of
what it is about.

The ids live in a context variable holding one dict per request (set by the API's request-id
middleware) or per job (set by the worker's task). Code that learns an id later, e.g. a dependency
that runs in a worker thread with a copy of the context, updates that same dict in place, so every
later line of the request, the access log line included, carries it too.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO, Any

FIELDS = ("request_id", "job_id")
"""Context fields every line carries (null when unknown)."""

_context: ContextVar[dict[str, str] | None] = ContextVar("keel_log_context", default=None)


def bind(**fields: str) -> None:
    """Start a fresh context for the current task (a request, a job) with these fields."""
    _context.set({k: v for k, v in fields.items() if v is not None})


def annotate(**fields: str) -> None:
    """Add fields to the current context, visible to everything sharing it (see the module doc)."""
    current = _context.get()
    if current is None:
        _context.set({k: v for k, v in fields.items() if v is not None})
    else:
        current.update({k: v for k, v in fields.items() if v is not None})


@contextmanager
def context(**fields: str) -> Iterator[None]:
    """Fields bound for the duration of the block, then the previous context again."""
    token = _context.set({**(_context.get() or {}), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def current() -> dict[str, str]:
    return dict(_context.get() or {})


class ContextFilter(logging.Filter):
    """Copies the context fields onto each record (`record.request_id`, `record.job_id`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _context.get() or {}
        for name in FIELDS:
            if getattr(record, name, None) is None:
                setattr(record, name, ctx.get(name))
        return True


_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", *FIELDS}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, job_id, any `extra=`
    fields, and the traceback (as text in `exc_info`) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **{name: getattr(record, name, None) for name in FIELDS},
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc_info"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.exc_text:
            out["exc_info"] = record.exc_text
        if record.stack_info:
            out["stack_info"] = record.stack_info
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The classic line, with ` [request_id=... job_id=...]` when known."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = " ".join(f"{n}={getattr(record, n)}" for n in FIELDS if getattr(record, n, None))
        if not ids:
            return line
        head, sep, tail = line.partition("\n")  # keep a traceback below the first line
        return f"{head} [{ids}]{sep}{tail}"


def configure(fmt: str | None = None, level: str | int | None = None, *, stream: IO[str] | None = None) -> None:
    """Send every logger's records through one handler on the root logger in `fmt` (default: the
    deployment's `log_format`). Idempotent: calling it again replaces Keel's handler only."""
    from core.config import settings

    fmt = fmt or settings.log_format
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_keel", False)]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler._keel = True  # type: ignore[attr-defined]
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level if level is not None else settings.LOG_LEVEL.upper())
