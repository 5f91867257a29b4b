"""The OpenAPI document is good enough to generate a pleasant SDK from: checked over every operation."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute

from api.openai.errors import OPENAI_PREFIXES

PROBLEM_REF = "#/components/schemas/Problem"


@pytest.fixture(scope="module")
def built():
    from api.main import create_app

    app = create_app()
    return app, app.openapi()


def _operations(schema):
    for path, item in schema["paths"].items():
        for method, op in item.items():
            yield path, method.upper(), op


def _api_routes(routes):
    """Every APIRoute, also inside included routers (newer FastAPI keeps them nested)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):
            yield from _api_routes(route.original_router.routes)


def test_operation_ids_are_handler_names_and_unique(built):
    app, schema = built
    routes = [r for r in _api_routes(app.routes) if r.include_in_schema]
    ids = [op["operationId"] for _, _, op in _operations(schema)]
    assert len(ids) == len(set(ids)), f"duplicate operationIds: {sorted(i for i in ids if ids.count(i) > 1)}"
    wrong = [f"{m} {p}: {op['operationId']}" for p, m, op in _operations(schema)
             if not any(r.endpoint.__name__ == op["operationId"] and m in r.methods and p.endswith(r.path)
                        for r in routes)]
    assert wrong == [], "operationId must be the handler's name"
    bad_names = [i for i in ids if not i.isidentifier() or i != i.lower()]
    assert bad_names == [], "operationIds must be snake_case identifiers (they become SDK module names)"


def test_every_operation_has_summary_description_and_tags(built):
    _, schema = built
    missing = {f"{m} {p}": [k for k in ("summary", "description", "tags") if not op.get(k)]
               for p, m, op in _operations(schema)}
    assert {k: v for k, v in missing.items() if v} == {}
    declared = {t["name"] for t in schema.get("tags", [])}
    if declared:  # when tags are described, every used tag is described
        used = {t for _, _, op in _operations(schema) for t in op["tags"]}
        assert used <= declared, used - declared


def test_every_error_response_is_problem_json(built):
    _, schema = built
    assert "Problem" in schema["components"]["schemas"]
    bad, undeclared = [], []
    for p, m, op in _operations(schema):
        errors = {s: r for s, r in op["responses"].items() if s[0] in "45"}
        if not errors:
            undeclared.append(f"{m} {p}")
        for status, response in errors.items():
            content = response.get("content", {})
            if content.get("application/problem+json", {}).get("schema", {}).get("$ref") != PROBLEM_REF:
                bad.append(f"{m} {p} {status}: {sorted(content)}")
    assert undeclared == [], "operations without declared error responses"
    assert bad == [], "error responses must be application/problem+json with the Problem schema"


def test_authenticated_routes_declare_401_and_path_ids_declare_404(built):
    _, schema = built
    missing = []
    for p, m, op in _operations(schema):
        if op.get("security") and "401" not in op["responses"]:
            missing.append(f"{m} {p}: 401")
        if "{" in p and m != "PUT" and "404" not in op["responses"]:  # a PUT creates what it names
            missing.append(f"{m} {p}: 404")
        invalid = "400" if p.startswith(OPENAI_PREFIXES) else "422"  # OpenAI's routes answer 400
        if (op.get("parameters") or op.get("requestBody")) and invalid not in op["responses"]:
            missing.append(f"{m} {p}: {invalid}")
    assert missing == []


def test_v1_routes_require_the_bearer_key(built):
    _, schema = built
    schemes = schema["components"].get("securitySchemes", {})
    open_routes = [f"{m} {p}" for p, m, op in _operations(schema) if p.startswith("/v1") and not op.get("security")]
    assert open_routes == []
    assert all(s.get("scheme") == "bearer" for s in schemes.values())


def test_the_event_stream_declares_text_event_stream(built):
    _, schema = built
    streams = [(p, op) for p, m, op in _operations(schema) if op["operationId"] == "stream_job_events"]
    assert len(streams) == 1, "the SSE route stream_job_events exists"
    _, op = streams[0]
    content = op["responses"]["200"]["content"]
    assert "text/event-stream" in content, sorted(content)
    assert any(p["name"].lower() == "last-event-id" and p["in"] == "header" for p in op.get("parameters", [])), \
        "the stream documents the Last-Event-ID header"
