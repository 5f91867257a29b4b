"""The whole offline-RLHF pipeline through the HTTP API, a real Celery worker and a real local Ray:
SFT -> reward model -> distilled reward model -> PPO (model reward), plus PPO with the `gsm8k` rule
reward. Each job streams metrics and registers its output model, which the next job uses."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from keel_cli.demo import PIPELINE, PURPOSES, _resolve

pytestmark = pytest.mark.slow

PPO_METRICS = [
    "actor/pg_loss", "actor/entropy", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl",
    "actor/grad_norm", "critic/vf_loss", "critic/vf_clipfrac", "critic/score/mean", "critic/rewards/mean",
    "critic/advantages/var", "critic/values/mean", "critic/vf_explained_var", "actor/reward_kl_penalty",
    "actor/reward_kl_penalty_coeff", "response_length/mean", "response_length/clip_ratio", "timing_s/gen",
    "timing_s/ref", "timing_s/values", "timing_s/adv", "timing_s/update_critic", "timing_s/update_actor",
    "timing_s/step", "perf/throughput", "val/reward/mean",
]


def _wait(client, auth, job_id: str, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"{job_id} still {job['status']} after {timeout} s")


def _metric_names(client, auth, job_id: str) -> set[str]:
    body = client.get(f"/v1/jobs/{job_id}/metrics", headers=auth).json()
    series = body["data"] if isinstance(body, dict) and "data" in body else body
    if isinstance(series, dict):
        return set(series)
    return {s["name"] for s in series}


def test_pipeline_sft_rm_distill_ppo_through_the_api(client, auth, celery_worker, demo_assets):
    files = {}
    for name, purpose in PURPOSES.items():
        with open(demo_assets[name], "rb") as f:
            r = client.post("/v1/files", headers=auth, data={"purpose": purpose},
                            files={"file": (Path(demo_assets[name]).name, f)})
        assert r.status_code in (200, 201), r.text
        files[name] = r.json()["id"]

    outputs: dict[str, str] = {}
    jobs: dict[str, dict] = {}
    for step in PIPELINE:
        body = {"model": _resolve(step["model"], demo_assets, outputs), "training_file": files[step["train"]],
                "validation_file": files.get(step.get("val")), "method": _resolve(step["method"], demo_assets, outputs),
                "suffix": step["name"]}
        r = client.post("/v1/jobs", headers=auth, json=body)
        assert r.status_code == 201, r.text
        job = _wait(client, auth, r.json()["id"])
        assert job["status"] == "succeeded", job["error"]
        model = client.get(f"/v1/models/{job['output_model']}", headers=auth).json()
        assert model["job_id"] == job["id"]
        outputs[step["name"]] = job["output_model"]
        jobs[step["name"]] = job

    assert jobs["reward_model"]["latest_metrics"]["val/rm/accuracy"] >= 0.9
    assert jobs["rm_distill"]["latest_metrics"]["distill/val_kl"] < 0.05
    names = _metric_names(client, auth, jobs["ppo"]["id"])
    assert [m for m in PPO_METRICS if m not in names and m != "val/reward/mean"] == []  # the demo's PPO: no val file

    # PPO again from the SFT model, scored by the GSM8K rule instead of a reward model.
    ppo_step = PIPELINE[-1]
    method = _resolve(ppo_step["method"], demo_assets, outputs)
    method["reward"] = {"function": "gsm8k"}
    r = client.post("/v1/jobs", headers=auth, json={
        "model": outputs["sft"], "training_file": files["prompts_train"], "validation_file": files["prompts_val"],
        "method": method})
    assert r.status_code == 201, r.text
    job = _wait(client, auth, r.json()["id"])
    assert job["status"] == "succeeded", job["error"]
    names = _metric_names(client, auth, job["id"])
    assert [m for m in PPO_METRICS if m not in names] == []
    events = client.get(f"/v1/jobs/{job['id']}/events", params={"limit": 1000}, headers=auth).json()["data"]
    steps = [e["data"]["step"] for e in events if e["type"] == "job.metrics"]
    assert steps == list(range(len(steps))) and len(steps) == 7  # step 0: the validation before training
    assert events[-1]["type"] == "job.done"
