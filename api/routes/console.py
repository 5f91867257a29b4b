"""The web console: a single-page app served at `/`, its assets under `/console/`.

Static files only (api/console/static, the uPlot chart library vendored beside them): no CDN, no Node
build. The page holds no secret; it asks for an API key and calls the `/v1` routes with it like any
client, so it needs no authentication of its own. None of these routes are in the OpenAPI document."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam
from fastapi.responses import FileResponse

from api.errors import ApiError

STATIC = Path(__file__).resolve().parent.parent / "console" / "static"

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8"}
# The page may load only its own files: no inline scripts, nothing from another origin.
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
_HEADERS = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}

router = APIRouter(include_in_schema=False)


def _asset_files() -> dict[str, Path]:
    """Servable assets by URL path, listed once: a request can only name one of these."""
    return {p.relative_to(STATIC).as_posix(): p for p in STATIC.rglob("*")
            if p.is_file() and p.suffix in _TYPES}


_ASSETS = _asset_files()


@router.get("/")
def console_page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type=_TYPES[".html"], headers=_HEADERS)


@router.get("/console/{asset:path}")
def console_asset(asset: Annotated[str, PathParam(max_length=200)]) -> FileResponse:
    path = _ASSETS.get(asset)
    if path is None:
        raise ApiError(404, "not_found", f"No console asset {asset!r}.", param="asset")
    return FileResponse(path, media_type=_TYPES[path.suffix], headers=_HEADERS)
