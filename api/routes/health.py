"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from api.errors import problem_response, problem_responses
from core.db import get_engine
from workers.dispatch import broker_reachable

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness", responses=problem_responses(500))
def healthz() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness", responses=problem_responses(503))
def readyz(request: Request):
    """The database and the broker are reachable."""
    down = []
    try:
        with get_engine().connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception:  # noqa: BLE001 - any failure to answer means not ready
        down.append("database")
    if not broker_reachable(timeout=2.0):
        down.append("broker")
    if down:
        return problem_response(request, 503, "not_ready", f"Unavailable: {', '.join(down)}.",
                                param=down[0], headers={"Retry-After": "5"})
    return JSONResponse({"status": "ready", "database": "ok", "broker": "ok"})
