"""A PPO job's remote environment (`method.environment: {"type": "openenv", "url": ...}`) on /v1/jobs: a URL
on a private address is a 422 problem naming the param unless the deployment allow-lists its host
(`KEEL_ENV_ALLOWED_HOSTS`); KEEL_WEBHOOK_ALLOW_PRIVATE does not lift the rule."""

from __future__ import annotations

import pytest

from core.config import settings
from tests.api.job_requests import create, ppo_body

PARAM = "method.environment.url"


def _body(files, url: str) -> dict:
    body = ppo_body(files, data={"train_batch_size": 2, "max_prompt_length": 16, "max_response_length": 16},
                    actor={"ppo_mini_batch_size": 2}, algorithm={"adv_estimator": "grpo"},
                    rollout={"n": 2, "multi_turn": {"enable": True}})
    body["method"]["environment"] = {"type": "openenv", "url": url, "timeout_s": 5}
    return body


@pytest.mark.parametrize("url", ["http://10.0.0.5:8000", "http://127.0.0.1:9", "http://[::1]:8000/env",
                                 "http://169.254.169.254/", "ftp://8.8.8.8/"])
def test_a_private_or_malformed_url_is_a_422(client, auth, files, monkeypatch, url):
    monkeypatch.setattr(settings, "ENV_ALLOWED_HOSTS", [])
    monkeypatch.setattr(settings, "WEBHOOK_ALLOW_PRIVATE", True)
    r = create(client, auth, _body(files, url))
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json"), r.text
    assert (r.json()["code"], r.json()["param"]) == ("invalid_url", PARAM)
    assert "KEEL_ENV_ALLOWED_HOSTS" in r.json()["detail"] or "absolute http" in r.json()["detail"]


def test_an_allow_listed_host_passes(client, auth, files, monkeypatch):
    monkeypatch.setattr(settings, "ENV_ALLOWED_HOSTS", ["10.0.0.5"])
    r = client.post("/v1/jobs?dry_run=true", headers=auth, json=_body(files, "http://10.0.0.5:8000"))
    assert r.status_code == 200, r.text
    r = create(client, auth, _body(files, "http://10.0.0.6:8000"))
    assert (r.status_code, r.json()["param"]) == (422, PARAM)
