"""The app factory: routers, error handlers, request ids. Nothing else lives here."""

from __future__ import annotations

import logging
import uuid

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute

from api import errors
from api.routes import health
from core.config import settings

DESCRIPTION = """Keel is an offline-RLHF training service: upload datasets, run SFT, reward-model,
reward-model distillation and PPO jobs, and follow them live."""


def _operation_id(route: APIRoute) -> str:
    # Handler name = operationId = SDK method name.
    return route.name


def create_app() -> FastAPI:
    logging.basicConfig(level=settings.LOG_LEVEL)
    app = FastAPI(title="Keel", version="0.1.0", description=DESCRIPTION,
                  generate_unique_id_function=_operation_id)
    errors.install(app)

    @app.middleware("http")
    async def request_id(request: Request, call_next):
        rid = request.headers.get("X-Request-ID", "")
        if not rid or len(rid) > 100 or not rid.isascii():
            rid = "req_" + uuid.uuid4().hex
        request.state.request_id = rid
        response = await call_next(request)
        response.headers["X-Request-ID"] = rid
        return response

    app.include_router(health.router)
    return app


app = create_app()
