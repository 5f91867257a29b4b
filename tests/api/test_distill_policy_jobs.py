"""`distill_policy` jobs at create time: the teacher is resolved like a job's model, the `distill`
section reaches the engine as its config, and every refusal is a 422 naming the param (the API
refuses what the engine refuses, at the same path)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.schemas import hyperparameters as H
from engine import config as E
from engine.errors import ConfigError
from tests.api.job_requests import create, make_file

REFUSED = [
    ({"algorithm": {"adv_estimator": "remax"}}, "algorithm.adv_estimator"),
    ({"rollout": {"mode": "one_step_off"}}, "rollout.mode"),
    ({"guardrails": {"reward_filter": {"enable": True, "replay_buffer_size": 4}}, "algorithm": {"adv_estimator": "gae"}},
     "guardrails.reward_filter.replay_buffer_size"),
]


@pytest.mark.parametrize(("data", "param"), REFUSED, ids=[p for _, p in REFUSED])
def test_engine_and_api_refuse_at_the_same_path(data, param):
    with pytest.raises(ConfigError) as engine_error:
        E.build_config(E.DistillPolicyConfig, data)
    assert engine_error.value.param == param
    with pytest.raises(ValidationError) as api_error:
        H.DistillPolicyConfig.model_validate(data)
    assert ".".join(str(p) for p in api_error.value.errors()[0]["loc"]) == param


def test_defaults_and_knobs_reach_the_engine():
    dumped = H.DistillPolicyConfig.model_validate({"distill": {"task_reward_weight": 0.5}}).model_dump(mode="json")
    cfg = E.build_config(E.DistillPolicyConfig, dumped)
    assert cfg.distill.task_reward_weight == 0.5 and cfg.distill.reverse_kl_coef == 1.0
    assert (cfg.algorithm.adv_estimator, cfg.algorithm.gamma, cfg.algorithm.use_kl_in_reward) == (
        "reinforce_plus_plus", 0.0, False)
    assert E.config_to_dict(E.DistillPolicyConfig()) == H.DistillPolicyConfig().model_dump(mode="json")


@pytest.fixture
def files(db, project_key):
    return {"prompts": make_file(db, project_key[0], "prompts")}


def _body(files, *, teacher: str | None = "org/teacher", reward: dict | None = None, **hyper) -> dict:
    method = {"type": "distill_policy", "hyperparameters": {"data": {"train_batch_size": 8},
                                                            "actor": {"ppo_mini_batch_size": 8}, **hyper}}
    if teacher is not None:
        method["teacher"] = teacher
    if reward is not None:
        method["reward"] = reward
    return {"model": "org/name", "training_file": files["prompts"], "method": method}


def test_create_keeps_a_distillation_job(client, auth, files, dispatched):
    r = create(client, auth, _body(files, reward={"function": "gsm8k"}, distill={"task_reward_weight": 0.25}))
    assert r.status_code == 201, r.text
    method = r.json()["method"]
    assert method["teacher"] == "org/teacher"
    assert method["hyperparameters"]["distill"] == {"reverse_kl_coef": 1.0, "task_reward_weight": 0.25}


@pytest.mark.parametrize(("body", "param"), [
    ({"teacher": None}, "method.teacher"),
    ({"distill": {"task_reward_weight": 1.0}}, "method.reward"),
    ({"distill": {"reverse_kl_coef": 0.0}}, "method.hyperparameters.distill.reverse_kl_coef"),
    ({"rollout": {"mode": "one_step_off"}}, "method.hyperparameters.rollout.mode"),
    ({"teacher": "/not/under/any/root"}, "method.teacher"),
])
def test_create_refuses_naming_the_param(client, auth, files, dispatched, body, param):
    kw = dict(body)
    teacher = kw.pop("teacher", "org/teacher")
    r = create(client, auth, _body(files, teacher=teacher, **kw))
    assert r.status_code == 422, r.text
    assert r.json()["param"] == param, r.json()
