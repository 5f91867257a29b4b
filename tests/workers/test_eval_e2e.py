"""An eval job through the HTTP API, a real Celery worker and a real local Ray: it succeeds without an
output model, reports its summary once, and links an `eval_results` file that downloads with one
row per prompt and sample."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _wait(client, auth, job_id: str, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"{job_id} still {job['status']} after {timeout} s")


def test_eval_job_through_the_api(client, auth, celery_worker, demo_assets):
    with open(demo_assets["prompts_val"], "rb") as f:  # 64 prompts
        r = client.post("/v1/files", headers=auth, data={"purpose": "prompts"},
                        files={"file": (Path(demo_assets["prompts_val"]).name, f)})
    assert r.status_code in (200, 201), r.text
    prompts = r.json()["id"]
    body = {"model": demo_assets["model"], "training_file": prompts,
            "method": {"type": "eval", "reward": {"function": "gsm8k"}, "compare_to": demo_assets["small_model"],
                       "hyperparameters": {"data": {"max_prompt_length": 32, "max_response_length": 6,
                                                    "val_batch_size": 32},
                                           "rollout": {"n": 2, "temperature": 1.0}}}}
    r = client.post("/v1/jobs", headers=auth, json=body)
    assert r.status_code == 201, r.text
    job = _wait(client, auth, r.json()["id"])
    assert job["status"] == "succeeded", job["error"]
    assert job["output_model"] is None and len(job["result_files"]) == 1
    metrics = job["latest_metrics"]
    for name in ("eval/reward/mean", "eval/reward/std", "eval/response_length/mean", "eval/pass@1", "eval/pass@2",
                 "eval/win_rate", "eval/win_rate_se"):
        assert name in metrics, name
    events = client.get(f"/v1/jobs/{job['id']}/events", params={"limit": 1000}, headers=auth).json()["data"]
    assert [e["data"]["values"] for e in events if e["type"] == "job.metrics"] == [metrics]

    file_id = job["result_files"][0]
    info = client.get(f"/v1/files/{file_id}", headers=auth).json()
    assert (info["purpose"], info["format"], info["rows"]) == ("eval_results", "jsonl", 128)
    r = client.get(f"/v1/files/{file_id}/content", headers=auth)
    assert r.status_code == 200 and int(r.headers["content-length"]) == info["bytes"]
    rows = [json.loads(line) for line in r.text.splitlines()]
    assert len(rows) == 64 * 2
    assert [(x["prompt_index"], x["sample_index"]) for x in rows] == [(i, j) for i in range(64) for j in range(2)]
    assert all(x["score"] in (0.0, 1.0) and x["compare_score"] in (0.0, 1.0) for x in rows)
    assert metrics["eval/reward/mean"] == pytest.approx(sum(x["score"] for x in rows) / 128)
    assert all(isinstance(x["response"], str) and isinstance(x["compare_response"], str) for x in rows)
    preview = client.get(f"/v1/files/{file_id}/preview", params={"limit": 2}, headers=auth).json()
    assert preview["data"] == [{k: v for k, v in x.items()} for x in rows[:2]]
    listed = client.get("/v1/models", headers=auth).json()["data"]
    assert [m for m in listed if m["owned_by"] != "keel"] == []  # an eval registers no model (base models are shared)

    # The same evaluation again writes the same bytes: it links the existing file (no duplicate row).
    again = _wait(client, auth, client.post("/v1/jobs", headers=auth, json=body).json()["id"])
    assert again["status"] == "succeeded" and again["result_files"] == [file_id]
    assert len(client.get("/v1/files?purpose=eval_results", headers=auth).json()["data"]) == 1
