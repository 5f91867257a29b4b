"""The API's documentation: the OpenAPI document's finishing touches, and offline Swagger UI at
`/docs` and ReDoc at `/redoc` whose JS/CSS the app serves itself.

The assets come from the `fastapi-offline` package (a pip dependency), so the pages work with no
internet and no CDN. ReDoc's bundle names one remote file, the Redocly logo in its side menu: the app
serves the bundle with that address pointing at a logo of its own. Only this module knows where the
files live."""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from api.errors import PROBLEM_JSON, Problem

ASSETS_PATH = "/docs-assets"
ASSET_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
REDOC_REMOTE_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
REDOC_LOGO = ("data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E"
              "%3Crect width='16' height='16' rx='3' fill='%23d63c3c'/%3E%3C/svg%3E")
"""ReDoc's side-menu logo, inline: the bundle would fetch REDOC_REMOTE_LOGO from a CDN on every view."""

TAGS = [
    {"name": "files", "description": "Datasets: upload (checked and deduplicated), list, preview, download, delete."},
    {"name": "jobs", "description": "Jobs (SFT, reward model, RM distillation, DPO, PPO and its critic-free "
                                    "estimators, evaluation): plan, create, follow, cancel, delete."},
    {"name": "events", "description": "A job's event log: paged, as metric series, and live as server-sent events."},
    {"name": "checkpoints", "description": "A job's checkpoints, downloadable as tar archives."},
    {"name": "models", "description": "Trained models: downloadable as Hugging Face directories, usable as the base, "
                                      "teacher or reward model of later jobs."},
    {"name": "trainers", "description": "Interactive trainers (Tinker-style): a model held by a Ray actor, trained by "
                                        "your own loop through forward_backward, optim_step, sample and saves."},
    {"name": "webhooks", "description": "Signed (Standard Webhooks) notifications of job outcomes, with a delivery log."},
    {"name": "secrets", "description": "Write-only project secrets for integrations (admin keys only)."},
    {"name": "fine_tuning", "description": "OpenAI's fine-tuning API shapes over the same jobs and files, and graders."},
    {"name": "inference", "description": "OpenAI's chat completions and completions on every model the project can "
                                         "use, answered by Ray Serve."},
    {"name": "keys", "description": "The project's API keys (admin keys only): list, create, revoke."},
    {"name": "health", "description": "Liveness and readiness probes."},
]
"""Tag order and descriptions as the docs pages show them."""

_PROBLEM_REF = "#/components/schemas/Problem"
_FASTAPI_422 = ("HTTPValidationError", "ValidationError")


def problem_json_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """Make every declared error response exactly `application/problem+json` with the Problem schema.

    That is what `api.errors` sends for every error, validation errors included, but FastAPI documents
    its own `HTTPValidationError` for 422s a route does not declare, and also lists a declared
    Problem under the route's own media type (`application/json`, `text/event-stream`). On the
    OpenAI-compatible routes a validation error is a 400, as OpenAI answers it. Idempotent."""
    from api.openai.errors import is_openai_path

    for path, item in schema.get("paths", {}).items():
        for op in item.values():
            responses = op.get("responses", {})
            if is_openai_path(path) and "422" in responses:
                moved = responses.pop("422")
                responses.setdefault("400", {**moved, "description": "Bad Request"})
            for status, response in responses.items():
                if status[:1] in ("4", "5") or status == "default":
                    response["content"] = {PROBLEM_JSON: {"schema": {"$ref": _PROBLEM_REF}}}
                    if response.get("description") == "Validation Error":
                        response["description"] = "Unprocessable Content"
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("Problem", Problem.model_json_schema(ref_template="#/components/schemas/{model}"))
    for name in _FASTAPI_422:
        rest = {k: v for k, v in schema.items() if k != "components"}
        others = {k: v for k, v in components.items() if k not in _FASTAPI_422}
        if f'"#/components/schemas/{name}"' not in json.dumps([rest, others]):
            components.pop(name, None)
    return schema


def paths_in_order(schema: dict[str, Any], routers: Sequence[APIRouter]) -> dict[str, Any]:
    """The document's paths in the order of `routers` (FastAPI lists them in the order the app routes
    them); paths of no router in it keep their places, before the others. Idempotent."""
    position: dict[str, int] = {}
    for router in routers:
        for route in router.routes:
            path = getattr(route, "path", None)
            if isinstance(path, str):
                position.setdefault(path, len(position))
    paths = schema.get("paths", {})
    ordered = sorted(paths, key=lambda p: position.get(p, -1))
    if ordered != list(paths):
        schema["paths"] = {p: paths[p] for p in ordered}
    return schema


def assets_dir() -> Path:
    """The directory of the packaged Swagger UI and ReDoc bundles."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        raise RuntimeError("the docs assets need the `fastapi-offline` package: pip install fastapi-offline")
    static = Path(spec.origin).parent / "static"
    missing = [f for f in ASSET_FILES if not (static / f).is_file()]
    if missing:
        raise RuntimeError(f"fastapi-offline ships no {', '.join(missing)} in {static}")
    return static


@functools.cache
def redoc_bundle() -> bytes:
    """ReDoc's standalone bundle with its one remote address (the logo) replaced by REDOC_LOGO."""
    js = (assets_dir() / "redoc.standalone.js").read_text(encoding="utf-8")
    if REDOC_REMOTE_LOGO not in js:  # a new ReDoc release: tests/api/test_docs_browser.py checks the page
        return js.encode()
    return js.replace(REDOC_REMOTE_LOGO, REDOC_LOGO).encode()


def install(app: FastAPI, documented: Sequence[APIRouter] = ()) -> None:
    """Finish the OpenAPI document; register `/docs`, `/redoc` and the asset mount (none of them in it).
    `documented`: the app's routers in the order the document lists their paths, whatever order the
    app includes (and so matches) them in."""
    app.openapi_tags = TAGS
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        return problem_json_errors(paths_in_order(generate(), documented))

    app.openapi = openapi  # type: ignore[method-assign]

    # Before the mount, which would otherwise serve the unpatched file.
    @app.get(f"{ASSETS_PATH}/redoc.standalone.js", include_in_schema=False)
    def redoc_js() -> Response:
        return Response(redoc_bundle(), media_type="text/javascript; charset=utf-8",
                        headers={"Cache-Control": "public, max-age=3600"})

    app.mount(ASSETS_PATH, StaticFiles(directory=assets_dir()), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    title = app.title

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        assets = root + ASSETS_PATH
        return get_swagger_ui_html(
            openapi_url=root + openapi_url, title=f"{title} API",
            swagger_js_url=f"{assets}/swagger-ui-bundle.js", swagger_css_url=f"{assets}/swagger-ui.css",
            swagger_favicon_url=f"{assets}/favicon.png",
            # No online validator badge: it would call out to validator.swagger.io.
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": True,
                                   "displayOperationId": True, "tryItOutEnabled": True})

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        assets = root + ASSETS_PATH
        return get_redoc_html(openapi_url=root + openapi_url, title=f"{title} API reference",
                              redoc_js_url=f"{assets}/redoc.standalone.js",
                              redoc_favicon_url=f"{assets}/favicon.png", with_google_fonts=False)
