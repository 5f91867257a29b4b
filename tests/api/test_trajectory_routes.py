"""The trajectory routes (`/v1/trajectories/{id}`, `/reward`) and the create of a PPO job on recorded
trajectories, over HTTP on a real database; the calls are recorded as the inference route records
them (`core.trajectories.record`), without a model server. The training itself:
tests/inference/test_trajectory_training.py."""

from __future__ import annotations

import json
import secrets

import pytest
from job_requests import create, project_of

from core import trajectories
from core.db import session_scope

SOURCE = "method.hyperparameters.rollout.source"


def record(project_id: str, trajectory_id: str, model: str = "org/name") -> None:
    """Two calls: a prompt and its completion, then the next turn extending them."""
    with session_scope() as db:
        trajectories.record(db, project_id, trajectory_id, model, [1, 2, 3],
                            [{"token_ids": [4, 5], "logprobs": [-0.1, -0.2]}])
        trajectories.record(db, project_id, trajectory_id, model, [1, 2, 3, 4, 5, 6],
                            [{"token_ids": [7], "logprobs": [-0.3]}])


def problem(r, status: int, code: str, param: str | None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert (body["code"], body["param"]) == (code, param), body
    if r.url.path.startswith("/v1/trajectories"):  # the OpenAI room's error object, for the openai client
        assert body["error"]["code"] == code
    return body


def trajectory_job(**rollout) -> dict:
    return {"model": "org/name", "method": {"type": "ppo", "hyperparameters": {
        "data": {"train_batch_size": 1, "max_prompt_length": 16, "max_response_length": 16},
        "actor": {"ppo_mini_batch_size": 1}, "algorithm": {"adv_estimator": "grpo"},
        "rollout": {"n": 2, "source": "trajectories", **rollout}}}}


@pytest.fixture
def tid() -> str:
    return f"traj-{secrets.token_hex(4)}"


def test_reward_then_read_back(client, auth, db, tid):
    project_id = project_of(db, auth)
    problem(client.post(f"/v1/trajectories/{tid}/reward", headers=auth, json={"reward": 1.0}), 404, "not_found",
            "trajectory_id")
    record(project_id, tid)
    problem(client.get(f"/v1/trajectories/{tid}-x", headers=auth), 404, "not_found", "trajectory_id")
    r = client.get(f"/v1/trajectories/{tid}", headers=auth)
    assert r.status_code == 200, r.text
    assert r.json()["reward"] is None and r.json()["calls"] == 2
    r = client.post(f"/v1/trajectories/{tid}/reward", headers=auth,
                    json={"reward": 0.5, "group_id": "task-1", "metadata": {"env": "demo"}})
    assert r.status_code == 200, r.text
    assert {k: r.json()[k] for k in ("id", "calls", "prompt_tokens", "completion_tokens", "reward", "group_id",
                                     "metadata", "consumed_by")} == {
        "id": tid, "calls": 2, "prompt_tokens": 9, "completion_tokens": 3, "reward": 0.5, "group_id": "task-1",
        "metadata": {"env": "demo"}, "consumed_by": None}
    # Until a job takes it, a reward may be posted again and replaces the first.
    assert client.post(f"/v1/trajectories/{tid}/reward", headers=auth, json={"reward": -1}).json()["reward"] == -1
    calls = client.get(f"/v1/trajectories/{tid}", headers=auth).json()
    assert calls["reward"] == -1 and calls["group_id"] is None
    assert [(c["prompt_token_ids"], c["completion_token_ids"], c["logprobs"]) for c in calls["data"]] == [
        ([1, 2, 3], [4, 5], [-0.1, -0.2]), ([1, 2, 3, 4, 5, 6], [7], [-0.3])]


@pytest.mark.parametrize(("body", "code", "param"), [
    ({}, "invalid_request", "reward"),
    ({"reward": "high"}, "invalid_request", "reward"),
    ({"reward": 1e7}, "invalid_request", "reward"),
    ({"reward": 1, "group_id": ""}, "invalid_request", "group_id"),
    ({"reward": 1, "score": 2}, "unknown_parameter", "score"),
])
def test_bad_rewards_are_400_problems(client, auth, db, tid, body, code, param):
    record(project_of(db, auth), tid)
    problem(client.post(f"/v1/trajectories/{tid}/reward", headers=auth, json=body), 400, code, param)
    assert client.get(f"/v1/trajectories/{tid}", headers=auth).json()["reward"] is None


def test_another_project_sees_nothing(client, auth, other_auth, db, tid):
    record(project_of(db, auth), tid)
    assert client.post(f"/v1/trajectories/{tid}/reward", headers=auth, json={"reward": 1}).status_code == 200
    problem(client.get(f"/v1/trajectories/{tid}", headers=other_auth), 404, "not_found", "trajectory_id")
    problem(client.post(f"/v1/trajectories/{tid}/reward", headers=other_auth, json={"reward": 0}), 404, "not_found",
            "trajectory_id")
    assert client.get(f"/v1/trajectories/{tid}", headers=auth).json()["reward"] == 1
    # Nor can its jobs train on them.
    problem(create(client, other_auth, trajectory_job()), 422, "no_trajectories", SOURCE)


def test_a_job_snapshots_and_consumes_the_scored_trajectories(client, auth, db, tid):
    project_id = project_of(db, auth)
    problem(create(client, auth, trajectory_job()), 422, "no_trajectories", SOURCE)
    for i, group in enumerate(("g1", "g1", None)):
        record(project_id, f"{tid}-{i}")
        r = client.post(f"/v1/trajectories/{tid}-{i}/reward", headers=auth, json={"reward": i, "group_id": group})
        assert r.status_code == 200, r.text
    record(project_id, f"{tid}-unscored")
    record(project_id, f"{tid}-other", model="org/other")  # sampled from another model: never taken
    assert client.post(f"/v1/trajectories/{tid}-other/reward", headers=auth, json={"reward": 1}).status_code == 200

    plan = client.post("/v1/jobs?dry_run=true", headers=auth, json=trajectory_job())
    assert plan.status_code == 200, plan.text  # a dry run takes nothing
    assert client.get(f"/v1/trajectories/{tid}-0", headers=auth).json()["consumed_by"] is None
    r = create(client, auth, trajectory_job())
    assert r.status_code == 201, r.text
    file_id = r.json()["training_file"]
    assert client.get(f"/v1/files/{file_id}", headers=auth).json()["purpose"] == "trajectories"
    content = client.get(f"/v1/files/{file_id}/content", headers=auth)
    rows = [json.loads(line) for line in content.text.splitlines()]
    assert [(row["trajectory_id"], row["group_id"], row["reward"]) for row in rows] == [
        (f"{tid}-0", "g1", 0), (f"{tid}-1", "g1", 1), (f"{tid}-2", None, 2)]
    assert rows[0]["calls"][1] == {"prompt_token_ids": [1, 2, 3, 4, 5, 6], "completion_token_ids": [7],
                                   "logprobs": [-0.3]}
    assert client.get(f"/v1/trajectories/{tid}-0", headers=auth).json()["consumed_by"] == file_id
    # Taken: its outcome is fixed (a retry of the same reward is fine), and the next job finds none left.
    problem(client.post(f"/v1/trajectories/{tid}-0/reward", headers=auth, json={"reward": 5, "group_id": "g1"}),
            409, "trajectory_consumed", "reward")
    assert client.post(f"/v1/trajectories/{tid}-0/reward", headers=auth,
                       json={"reward": 0, "group_id": "g1"}).status_code == 200
    body = problem(create(client, auth, trajectory_job()), 422, "no_trajectories", SOURCE)
    assert "other model" in body["detail"]
    # Unless asked: `all` takes them again (the same bytes: the same snapshot file), and so does the file named.
    again = create(client, auth, trajectory_job(trajectory_filter="all"))
    assert again.status_code == 201, again.text
    assert again.json()["training_file"] == file_id
    named = create(client, auth, {**trajectory_job(), "training_file": file_id})
    assert named.status_code == 201, named.text


def test_the_source_decides_what_a_ppo_job_needs(client, auth, db, tid):
    record(project_of(db, auth), tid)
    client.post(f"/v1/trajectories/{tid}/reward", headers=auth, json={"reward": 1})
    body = trajectory_job()
    problem(create(client, auth, {**body, "method": {**body["method"], "reward": {"function": "gsm8k"}}}), 422,
            "invalid_request", "method.reward")
    generate = trajectory_job(source="generate")
    generate["method"]["reward"] = {"function": "gsm8k"}
    problem(create(client, auth, generate), 422, "invalid_request", "training_file")
    problem(create(client, auth, {**body, "validation_file": "file-x"}), 422, "invalid_request", "validation_file")
    problem(create(client, auth, trajectory_job(mode="one_step_off")), 422, "invalid_request",
            "method.hyperparameters.rollout.source")
    prompts = create(client, auth, {**body, "training_file": "file-nope"})
    problem(prompts, 404, "not_found", "training_file")
