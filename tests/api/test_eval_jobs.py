"""Eval jobs over HTTP (no worker: the dispatcher is replaced by a recorder): create with defaults,
reference checks with `param`, what an eval job may not take; the `eval_results` purpose cannot be
uploaded; what an eval job reserves and its memory plan."""

from __future__ import annotations

import secrets

import pytest

from core.capacity import job_demand
from core.memory_plan import Capacity, plan_job
from core.model_shape import Architecture
from core.models import File, Model

TINY = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2, "intermediate_size": 16,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 32}


def make_file(db, project_id: str, purpose: str) -> str:
    f = File(project_id=project_id, purpose=purpose, filename=f"{purpose}.parquet", bytes=10,
             sha256=secrets.token_hex(32), format="parquet", storage_key=f"files/{secrets.token_hex(4)}")
    db.add(f)
    db.commit()
    return f.id


def make_model(db, project_id: str, kind: str) -> str:
    m = Model(project_id=project_id, name=f"m-{secrets.token_hex(3)}", kind=kind, format="hf",
              base_model="org/base", path="/nowhere")
    db.add(m)
    db.commit()
    return m.id


@pytest.fixture
def prompts(db, project_key) -> str:
    return make_file(db, project_key[0], "prompts")


def eval_body(prompts: str, **method) -> dict:
    return {"model": "org/name", "training_file": prompts,
            "method": {"type": "eval", "reward": {"function": "gsm8k"}, **method}}


def create(client, auth, body):
    return client.post("/v1/jobs", json=body, headers=auth)


def problem(r) -> tuple[int, str, str | None]:
    return r.status_code, r.json()["code"], r.json().get("param")


def test_create_an_eval_job_with_defaults(client, auth, prompts, awaiting_dispatch):
    r = create(client, auth, eval_body(prompts, overrides=["actor_rollout_ref.rollout.n=4"]))
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["method"]["type"] == "eval" and job["method"]["compare_to"] is None
    hp = job["method"]["hyperparameters"]
    assert hp == {"data": {"val_batch_size": 64, "max_prompt_length": 1024, "max_response_length": 2048,
                           "truncation": "error", "filter_overlong_prompts": False},
                  "model": {"dtype": "float32"}, "rollout": {"n": 4, "temperature": 0.0, "top_p": 1.0, "top_k": -1},
                  "pass_threshold": 1.0}
    assert job["output_model"] is None and job["result_files"] == [] and awaiting_dispatch(job["id"])
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth).json()["result_files"] == []


def test_eval_references_are_checked_with_their_param(client, auth, other_auth, db, project_key, prompts,
                                                     dispatched):
    policy, rm = make_model(db, project_key[0], "policy"), make_model(db, project_key[0], "reward_model")
    assert problem(create(client, auth, eval_body(prompts, compare_to="model-nope"))) == \
        (404, "not_found", "method.compare_to")
    assert problem(create(client, auth, eval_body(prompts, compare_to=rm))) == (422, "invalid_model", "method.compare_to")
    assert problem(create(client, auth, eval_body(prompts, compare_to="not a model"))) == \
        (422, "invalid_model", "method.compare_to")
    assert problem(create(client, auth, eval_body(prompts, compare_to="/etc"))) == \
        (422, "invalid_model", "method.compare_to")
    ok = create(client, auth, eval_body(prompts, compare_to=policy))
    assert ok.status_code == 201 and ok.json()["method"]["compare_to"] == policy
    r = create(client, other_auth, eval_body(make_file(db, project_of(other_auth), "prompts"), compare_to=policy))
    assert problem(r) == (404, "not_found", "method.compare_to")  # another project's model
    body = eval_body(prompts)
    body["method"]["reward"] = {"model": "model-nope"}
    assert problem(create(client, auth, body)) == (404, "not_found", "method.reward.model")
    body["method"]["reward"] = {"model": policy}
    assert problem(create(client, auth, body)) == (422, "invalid_model", "method.reward.model")
    body["method"]["reward"] = {"model": rm}
    assert create(client, auth, body).status_code == 201


def project_of(headers: dict[str, str]) -> str:
    from core.db import session_factory
    from core.security import authenticate

    with session_factory()() as db:
        return authenticate(db, headers["Authorization"].split()[1]).id


def test_what_an_eval_job_refuses(client, auth, db, project_key, prompts, dispatched):
    r = create(client, auth, {**eval_body(prompts), "validation_file": make_file(db, project_key[0], "prompts")})
    assert problem(r) == (422, "invalid_request", "validation_file")
    r = create(client, auth, eval_body(make_file(db, project_key[0], "preference")))
    assert problem(r) == (422, "invalid_file_purpose", "training_file")
    for hp, param in (({"rollout": {"n": 0}}, "rollout.n"), ({"rollout": {"top_p": 0.0}}, "rollout.top_p"),
                      ({"data": {"val_batch_size": 0}}, "data.val_batch_size"),
                      ({"rollout": {"clip_ratio": 0.2}}, "rollout.clip_ratio")):
        r = create(client, auth, eval_body(prompts, hyperparameters=hp))
        assert r.status_code == 422 and r.json()["param"] == f"method.hyperparameters.{param}", (hp, r.text)
    body = eval_body(prompts)
    del body["method"]["reward"]
    assert create(client, auth, body).json()["param"] == "method.reward"
    assert dispatched == []


def test_eval_results_cannot_be_uploaded(client, auth):
    r = client.post("/v1/files", headers=auth, data={"purpose": "eval_results"},
                    files={"file": ("r.jsonl", b'{"prompt": "x"}\n', "application/jsonl")})
    assert problem(r) == (422, "invalid_request", "purpose")
    assert client.get("/v1/files?purpose=eval_results", headers=auth).status_code == 200


def test_an_eval_job_reserves_one_colocated_group_and_plans_frozen_models():
    spec = {"method": {"type": "eval", "reward": {"model": "model-x"}, "hyperparameters": {}},
            "resources": {"num_workers": 2, "cpus_per_worker": 1.0, "colocate": False}}
    (group,) = job_demand(spec).groups
    assert (group.role, group.bundles) == ("colocated", 2)  # colocate=False does not split eval's roles
    arch = Architecture.from_config(TINY)
    hp = {"data": {"val_batch_size": 8, "max_prompt_length": 16, "max_response_length": 16}, "rollout": {"n": 2}}
    plan = plan_job("eval", hp, {}, {"policy": arch, "compare": arch, "reward": arch}, Capacity())
    assert set(plan["roles"]) == {"policy", "compare", "reward"} and plan["colocated"]
    assert all(r["gradients_bytes"] == 0 == r["optimizer_bytes"] for r in plan["roles"].values())
    assert plan["roles"]["policy"]["weights_bytes"] == arch.parameters("lm") * 4
    bigger = plan_job("eval", {**hp, "data": {**hp["data"], "val_batch_size": 64}}, {}, {"policy": arch},
                      Capacity(host_bytes=1))
    assert bigger["roles"]["policy"]["activations_bytes"] > plan["roles"]["policy"]["activations_bytes"]
    assert bigger["fits"] is False and bigger["param"] == "method.hyperparameters.data.val_batch_size"
