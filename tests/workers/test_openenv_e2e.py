"""A PPO job whose episodes run on OpenEnv servers (built with openenv-core's `create_app`, on loopback:
the test deployment allow-lists 127.0.0.1), through the API, the Celery worker and Ray.

1. Three rows play on a live server, one row's environment is a server that is gone: its episodes fail
   (counted in `episode/failed`, a quarter of each step's), under `max_failed_frac` 0.5, and the job
   succeeds; the live server served every other episode of both steps.
2. The server of a job is killed after its first step: the next step's episodes all fail and the job
   fails with `environment_failed`.
"""

from __future__ import annotations

import json
import secrets
import time
from functools import partial

import pytest
from openenv_server import ServerProcess

from tests.workers.test_pipeline_e2e import _wait as _wait_for

_wait = partial(_wait_for, timeout=600.0)

HYPER = {"data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 24},
         "rollout": {"n": 2, "multi_turn": {"enable": True, "max_turns": 2, "max_tokens_per_turn": 8,
                                            "max_failed_frac": 0.5}},
         "actor": {"ppo_mini_batch_size": 4, "ppo_epochs": 1, "optim": {"lr": 1e-4}},
         "algorithm": {"adv_estimator": "grpo"}, "trainer": {"total_training_steps": 2, "save_freq": -1}}


@pytest.fixture(scope="module")
def server():
    proc = ServerProcess()
    yield proc
    proc.kill()


def _upload(client, auth, rows: list[dict]) -> str:
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    r = client.post("/v1/files", headers=auth, data={"purpose": "prompts"}, files={"file": ("envs.jsonl", data)})
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


def _job(client, auth, model: str, file_id: str, environment: dict, hyper: dict) -> str:
    r = client.post("/v1/jobs", headers=auth, json={
        "model": model, "training_file": file_id, "seed": 1,
        "method": {"type": "ppo", "reward": {"function": "gsm8k"}, "environment": environment,
                   "hyperparameters": hyper}})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_failed_episodes_are_counted_and_the_job_succeeds_below_the_threshold(client, auth, celery_worker,
                                                                             demo_assets, server):
    key = secrets.token_hex(4)
    gone = ServerProcess()
    gone.kill()  # its port now refuses connections
    live = {"type": "openenv", "url": server.url, "timeout_s": 10,
            "reset_args": {"target": "qqqq", "turns": 2, "key": key}}
    dead = {"type": "openenv", "url": gone.url, "timeout_s": 5, "retries": 0}
    rows = [{"prompt": f"Say a word {i}.", "ground_truth": "0"} for i in range(3)]
    rows.append({"prompt": "Say a word 3.", "ground_truth": "0", "environment": dead})
    job = _wait(client, auth, _job(client, auth, demo_assets["model"], _upload(client, auth, rows), live, HYPER))

    assert job["status"] == "succeeded", job["error"]
    metrics = job["latest_metrics"]
    assert metrics["episode/failed"] == pytest.approx(0.25)  # the dead row's 2 episodes of 8
    assert metrics["episode/turns/mean"] > 0
    assert server.resets()[key] == 3 * 2 * 2  # live rows x n x steps


def test_killing_the_server_after_a_step_fails_the_job(client, auth, celery_worker, demo_assets):
    victim = ServerProcess()
    try:
        hyper = {**HYPER, "trainer": {"total_training_steps": 40, "save_freq": -1}}
        environment = {"type": "openenv", "url": victim.url, "timeout_s": 5, "retries": 0,
                       "reset_args": {"target": "qqqq", "turns": 2}}
        rows = [{"prompt": f"Say a word {i}.", "ground_truth": "0"} for i in range(4)]
        job_id = _job(client, auth, demo_assets["model"], _upload(client, auth, rows), environment, hyper)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
            if job["latest_metrics"].get("episode/turns/mean") or job["status"] not in ("queued", "running"):
                break
            time.sleep(0.2)
        assert job["status"] == "running", job
        victim.kill()
        job = _wait(client, auth, job_id)
    finally:
        victim.kill()
    assert job["status"] == "failed"
    assert job["error"]["code"] == "environment_failed", job["error"]
