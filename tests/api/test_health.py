"""Liveness, readiness, request ids and the problem+json shape."""


def test_healthz(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert r.headers["X-Request-ID"].startswith("req_")


def test_readyz_reports_database_and_broker(client):
    r = client.get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ready", "database": "ok", "broker": "ok"}


def test_readyz_names_what_is_down(client, monkeypatch):
    from api.routes import health

    monkeypatch.setattr(health, "broker_reachable", lambda timeout: False)
    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["code"] == "not_ready" and body["param"] == "broker" and "broker" in body["detail"]
    assert r.headers["Retry-After"]


def test_unknown_route_is_problem_json_with_request_id(client):
    r = client.get("/v1/nothing-here", headers={"X-Request-ID": "abc123"})
    assert r.status_code == 404
    assert r.json()["code"] == "not_found" and r.json()["request_id"] == "abc123"
    assert r.headers["X-Request-ID"] == "abc123"
