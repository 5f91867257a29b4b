"""The docs pages are self-contained: every asset they load is served by the app itself."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient


@pytest.fixture(scope="module")
def docs_client():
    from api.main import create_app

    with TestClient(create_app()) as c:  # the docs pages need no database
        yield c


def _asset_urls(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]+)"', html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_only_local_assets(docs_client, page):
    r = docs_client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "http://" not in r.text and "https://" not in r.text, "a docs page must not reach a CDN"
    urls = _asset_urls(r.text)
    assert urls, "the page loads its assets"
    for url in urls:
        asset = docs_client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 1000, url


def test_assets_have_the_right_media_types(docs_client):
    types = {name: docs_client.get(f"/docs-assets/{name}").headers["content-type"]
             for name in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js")}
    assert "javascript" in types["swagger-ui-bundle.js"] and "javascript" in types["redoc.standalone.js"]
    assert types["swagger-ui.css"].startswith("text/css")


def test_docs_routes_stay_out_of_the_schema(docs_client):
    paths = docs_client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith(("/docs", "/redoc"))]


def test_description_documents_the_conventions(docs_client):
    description = docs_client.get("/openapi.json").json()["info"]["description"]
    for topic in ("Authentication", "Errors", "Pagination", "Idempotency", "Server-sent events"):
        assert f"## {topic}" in description, topic
    assert "Last-Event-ID" in description and "Idempotency-Key" in description
