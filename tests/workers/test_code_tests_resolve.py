"""A `code_tests` job row: the worker hands the engine the deployment's python-grader limits (None when
python graders are off, which the engine refuses before any role starts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import add_file, add_job

from core.config import settings
from core.db import session_scope
from core.ids import new_id
from core.models import Job
from engine.errors import ConfigError
from engine.rewards.rules import rule_reward_kwargs
from workers.resolve import resolve_request


def test_a_code_tests_reward_gets_the_deployments_python_limits(project_id, monkeypatch):
    model = Path(settings.model_roots[0]) / f"base-{new_id('m')}"
    model.mkdir()
    job = add_job(project_id, add_file(project_id, purpose="prompts"), model=str(model), method="ppo")
    with session_scope() as db:
        row = db.get(Job, job)
        row.spec = {**row.spec, "method": {**row.spec["method"], "reward": {
            "model": None, "function": "code_tests", "options": {"timeout_s": 2}}}}
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", True)
    monkeypatch.setattr(settings, "PYTHON_GRADER_TIMEOUT_S", 7.0)
    with session_scope() as db:
        reward = resolve_request(db, db.get(Job, job)).reward
    assert reward["grading"]["python"]["wall_s"] == 7.0 and reward["options"] == {"timeout_s": 2}
    assert rule_reward_kwargs(reward, [None])["grading"] == reward["grading"]
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", False)  # turned off since the job was queued
    with session_scope() as db:
        reward = resolve_request(db, db.get(Job, job)).reward
    with pytest.raises(ConfigError) as err:
        rule_reward_kwargs(reward, [None])
    assert err.value.code == "python_graders_disabled"


def test_the_python_tool_gets_the_deployments_limits_or_is_withdrawn(project_id, monkeypatch):
    from engine.environments.building import make_environment
    from engine.methods.ppo_episodes import context

    model = Path(settings.model_roots[0]) / f"base-{new_id('m')}"
    model.mkdir()
    job = add_job(project_id, add_file(project_id, purpose="prompts"), model=str(model), method="ppo")
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", True)
    monkeypatch.setattr(settings, "PYTHON_GRADER_TIMEOUT_S", 7.0)
    with session_scope() as db:
        request = resolve_request(db, db.get(Job, job))
    env = make_environment({"type": "tools"}, context(request))
    assert env.tools["python"].limits.wall_s == 7.0
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", False)
    with session_scope() as db:
        request = resolve_request(db, db.get(Job, job))
    assert request.environment_python is None
    env = make_environment({"type": "tools"}, context(request))  # the default list: what the deployment runs
    assert list(env.tools) == ["calculator"]
    env = make_environment({"type": "tools", "tools": ["python", "calculator"]}, context(request))  # a row's own
    step = env.step('<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>')
    assert step.tool_errors == 1 and env.tools["python"] is None
