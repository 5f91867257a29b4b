"""The pipelined rollout's knobs at job create (issue 33): `rollout.mode`, `max_staleness`,
`colocate` with `resources.rollout_workers`, `partial`. The API refuses what the engine refuses, at
the same path, and the resources a pipelined rollout needs; every refusal is a 422 naming the param."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.schemas import hyperparameters as H
from engine import config as E
from engine.errors import ConfigError
from tests.api.job_requests import create, make_file, ppo_body

SEPARATE = {"colocate": False, "mode": "one_step_off"}
REFUSED = [
    ({"rollout": {"mode": "async"}}, "rollout.mode"),
    ({"rollout": {"mode": "async", "colocate": False, "max_staleness": 0}}, "rollout.max_staleness"),
    ({"rollout": {"partial": "continue", "colocate": False}}, "rollout.partial"),
    ({"rollout": {"partial": "continue", "mode": "one_step_off"}}, "rollout.partial"),
    ({"rollout": {"weight_sync": "collective"}}, "rollout.weight_sync"),
    ({"rollout": {"weight_sync": "object_store", "mode": "one_step_off"}}, "rollout.weight_sync"),
    ({"rollout": SEPARATE, "algorithm": {"adv_estimator": "grpo", "filter_groups": {"enable": True}}}, "rollout.mode"),
    ({"rollout": {"colocate": False}, "algorithm": {"adv_estimator": "remax"}}, "rollout.colocate"),
    ({"rollout": {"mode": "one_step_off"}, "guardrails": {"reward_filter": {"enable": True, "replay_buffer_size": 4}}},
     "rollout.mode"),
]


@pytest.mark.parametrize(("data", "param"), REFUSED, ids=[p + str(i) for i, (_, p) in enumerate(REFUSED)])
def test_engine_and_api_refuse_at_the_same_path(data, param):
    with pytest.raises(ConfigError) as engine_error:
        E.build_config(E.PPOConfig, data)
    assert engine_error.value.param == param
    with pytest.raises(ValidationError) as api_error:
        H.PPOConfig.model_validate(data)
    assert ".".join(str(p) for p in api_error.value.errors()[0]["loc"]) == param


def test_accepted_modes_reach_the_engine():
    for rollout in ({"mode": "one_step_off"}, SEPARATE, {"mode": "async", "colocate": False, "max_staleness": 3,
                                                         "partial": "continue"}):
        cfg = E.build_config(E.PPOConfig, H.PPOConfig.model_validate({"rollout": rollout}).model_dump(mode="json"))
        assert cfg.rollout.staleness == {"one_step_off": 1, "async": 3}[rollout["mode"]]
    assert E.PPOConfig().rollout.staleness == 0


@pytest.fixture
def files(db, project_key):
    return {"prompts": make_file(db, project_key[0], "prompts")}


def _body(files, rollout: dict, **resources) -> dict:
    body = ppo_body(files, rollout=rollout, algorithm={"adv_estimator": "grpo"}, actor={"ppo_mini_batch_size": 8},
                    data={"train_batch_size": 8})
    body["resources"] = {"cpus_per_worker": 1, **resources}
    return body


@pytest.mark.parametrize(("rollout", "resources", "param"), [
    (SEPARATE, {}, "resources.rollout_workers"),
    ({"mode": "one_step_off"}, {"rollout_workers": 1}, "resources.rollout_workers"),
    (SEPARATE, {"rollout_workers": 1, "num_workers": 2}, "method.hyperparameters.rollout.colocate"),
])
def test_create_refuses_resources_a_pipelined_rollout_cannot_use(client, auth, files, dispatched, rollout,
                                                                 resources, param):
    body = _body(files, rollout, **resources)
    if param.endswith("colocate"):  # fsdp2 shards: no worker holds the full weights to send
        body["method"]["hyperparameters"]["actor"]["strategy"] = "fsdp2"
    r = create(client, auth, body)
    assert r.status_code == 422, r.text
    assert r.json()["param"] == param, r.json()


def test_create_keeps_a_pipelined_rollout(client, auth, files, dispatched):
    r = create(client, auth, _body(files, {"mode": "async", "colocate": False, "max_staleness": 2}, rollout_workers=1))
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["method"]["hyperparameters"]["rollout"]["mode"] == "async"
    assert job["resources"]["rollout_workers"] == 1
