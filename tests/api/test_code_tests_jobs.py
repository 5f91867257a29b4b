"""`reward.function: code_tests` on /v1/jobs: accepted where python graders run, a 422 naming the
param where they do not or an option is bad."""

from __future__ import annotations

import pytest

from core.config import settings
from tests.api.job_requests import create, ppo_body


def _body(files, **options) -> dict:
    body = ppo_body(files)
    body["method"]["reward"] = {"function": "code_tests", "options": options}
    return body


def test_a_code_tests_job_is_created(client, auth, files, monkeypatch):
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", True)
    r = create(client, auth, _body(files, timeout_s=2.5, parallel=4))
    assert r.status_code in (200, 201), r.text
    assert r.json()["method"]["reward"] == {"model": None, "function": "code_tests",
                                            "options": {"timeout_s": 2.5, "parallel": 4}}


@pytest.mark.parametrize(("options", "param"), [({"timeout_s": 0}, "timeout_s"), ({"parallel": 0}, "parallel"),
                                                ({"parallel": 2.0}, "parallel"), ({"pattern": "x"}, "pattern")])
def test_bad_code_tests_options_are_422s(client, auth, files, monkeypatch, options, param):
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", True)
    r = create(client, auth, _body(files, **options))
    assert r.status_code == 422 and r.json()["param"] == f"method.reward.options.{param}", r.text


def test_code_tests_is_refused_where_python_graders_are_off(client, auth, files, monkeypatch):
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", False)
    r = create(client, auth, _body(files))
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
    assert (r.json()["code"], r.json()["param"]) == ("python_graders_disabled", "method.reward.function")


@pytest.mark.parametrize("tool", ["python", {"type": "function", "function": {"name": "python"}}])
def test_the_python_tool_is_refused_where_python_graders_are_off(client, auth, files, monkeypatch, tool):
    body = ppo_body(files)
    body["method"]["environment"] = {"type": "tools", "tools": ["calculator", tool]}
    body["method"]["hyperparameters"].setdefault("rollout", {})["multi_turn"] = {"enable": True}
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", False)
    r = create(client, auth, body)
    assert r.status_code == 422, r.text
    assert (r.json()["code"], r.json()["param"]) == ("python_graders_disabled", "method.environment.tools")
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", True)
    assert create(client, auth, body).status_code in (200, 201)
