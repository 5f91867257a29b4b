"""`api.middleware.RequestEnvelope`'s headers, and the jobs routes matched first while the OpenAPI
document keeps the routers' documented order (`api.main.ROUTERS`, `api.docs.paths_in_order`)."""

from __future__ import annotations

from fastapi.routing import APIRoute


def test_set_headers_appends_new_ones_in_order(database):
    from api.middleware import _set_headers

    message = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    _set_headers(message, [(b"x-ratelimit-limit", b"10"), (b"x-request-id", b"req_1")])
    assert message["headers"] == [(b"content-type", b"application/json"), (b"x-ratelimit-limit", b"10"),
                                  (b"x-request-id", b"req_1")]


def test_set_headers_replaces_one_already_there_as_mutable_headers_does(database):
    """A 429 carries its budget headers already: they are set again, never doubled."""
    from api.middleware import _set_headers

    message = {"type": "http.response.start", "status": 429,
               "headers": [(b"x-ratelimit-remaining", b"5"), (b"content-type", b"application/problem+json"),
                           (b"x-ratelimit-remaining", b"4")]}
    _set_headers(message, [(b"x-ratelimit-remaining", b"0"), (b"x-request-id", b"req_2")])
    assert message["headers"] == [(b"x-ratelimit-remaining", b"0"), (b"content-type", b"application/problem+json"),
                                  (b"x-request-id", b"req_2")]


def test_every_answer_carries_the_request_id_and_the_budget(client, auth, monkeypatch):
    from core.config import settings

    monkeypatch.setattr(settings, "RATE_LIMIT_PER_MINUTE", 50)
    r = client.get("/v1/jobs", headers={**auth, "X-Request-ID": "mine-1"})
    assert r.status_code == 200
    assert r.headers.get_list("X-Request-ID") == ["mine-1"]
    assert len(r.headers.get_list("X-RateLimit-Limit")) == 1 and "X-RateLimit-Reset" in r.headers


def test_the_jobs_routes_are_matched_first_and_documented_in_place(app):
    from api import main
    from api.routes import jobs

    included = [r for r in app.router.routes if hasattr(r, "original_router")]
    assert included[0].original_router is jobs.router
    documented = []
    for router in main.ROUTERS:
        for route in router.routes:
            if isinstance(route, APIRoute) and route.include_in_schema and route.path not in documented:
                documented.append(route.path)
    assert list(app.openapi()["paths"]) == documented
