"""The end-to-end flows over HTTP against `keel up` on its embedded defaults (SQLite, the embedded
broker, a local Ray; see conftest.py), with the host in a non-UTC zone: uploads, SFT -> RM -> distill
-> PPO, DPO, the OpenAI fine-tuning routes with the official client, an interactive trainer then a job
(idle release frees its CPU), pause / resume / cancel, a serving replica counted in admission, the SSE stream, 200 polls of a running job
without an error, timestamps in UTC. The last test stops the stack with SIGINT, as Ctrl-C does.

Tests run in this file's order (the last one stops the shared stack); step counts are tiny."""

from __future__ import annotations

import copy
import json
import os
import time

import pytest

from bench.embedded import TINY_SFT, stop, upload, wait_job
from keel_cli.demo import PIPELINE, PURPOSES, _resolve

pytestmark = pytest.mark.slow

LONG_SFT = {"type": "sft", "hyperparameters": {
    **TINY_SFT["hyperparameters"], "trainer": {"total_training_steps": 100_000, "save_freq": -1, "test_freq": -1}}}
"""Runs until cancelled: the polls, the stream, pause and resume all see it running."""


def _near_now(unix: int | None, since: float, slack: float = 5.0) -> None:
    """A timestamp of an answer is this instant in UTC (a naive local time would be hours off)."""
    assert unix is not None and since - slack <= unix <= time.time() + slack, (unix, since, time.time())


def _wait(http, job_id: str, statuses: tuple[str, ...], timeout: float = 300.0) -> dict:
    return wait_job(http, job_id, statuses, timeout)


@pytest.fixture(scope="module")
def files(http, demo) -> dict[str, str]:
    """Every demo dataset uploaded once (multipart POST /v1/files)."""
    return {name: upload(http, demo[name], purpose) for name, purpose in PURPOSES.items()}


def _tiny(step: dict) -> dict:
    """A demo step with 2 training steps and no periodic checkpoint."""
    method = copy.deepcopy(step["method"])
    method["hyperparameters"]["trainer"] = {"total_training_steps": 2, "save_freq": -1}
    return method


def test_uploads_are_listed_with_utc_times(http, files):
    since = time.time() - 600  # uploaded by the fixture, within the group's first minutes
    listed = {f["id"]: f for f in http.get("/v1/files", params={"limit": 100}).raise_for_status().json()["data"]}
    assert set(files.values()) <= set(listed)
    for file_id in files.values():
        assert listed[file_id]["status"] == "processed"
        _near_now(listed[file_id]["created_at"], since)


def test_sft_rm_distill_ppo_pipeline(http, demo, files):
    outputs: dict[str, str] = {}
    for step in PIPELINE:
        since = time.time()
        body = {"model": _resolve(step["model"], demo, outputs), "training_file": files[step["train"]],
                "validation_file": files[step["val"]] if "val" in step else None,
                "method": _resolve(_tiny(step), demo, outputs)}
        job = http.post("/v1/jobs", json=body).raise_for_status().json()
        done = _wait(http, job["id"], ("succeeded", "failed", "cancelled"))
        assert done["status"] == "succeeded", (step["name"], done["error"])
        _near_now(done["created_at"], since)
        _near_now(done["started_at"], since)
        _near_now(done["finished_at"], since)
        assert done["created_at"] <= done["started_at"] <= done["finished_at"]
        outputs[step["name"]] = done["output_model"]


def test_dpo(http, demo, files):
    body = {"model": demo["model"], "training_file": files["preference_train"], "method": {
        "type": "dpo", "hyperparameters": {"beta": 0.1, "data": {"train_batch_size": 8, "max_length": 96},
                                           "trainer": {"total_training_steps": 2, "save_freq": -1}}}}
    job = http.post("/v1/jobs", json=body)
    assert job.status_code == 201, job.text
    done = _wait(http, job.json()["id"], ("succeeded", "failed", "cancelled"))
    assert done["status"] == "succeeded", done["error"]


def test_openai_fine_tuning_polled_while_running(stack, demo, tmp_path):
    openai = pytest.importorskip("openai")
    import pyarrow.parquet as pq

    oai = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.key, max_retries=0, timeout=60)
    rows = pq.read_table(demo["sft_train"]).to_pylist()[:32]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": r["prompt"]},
                                                     {"role": "assistant", "content": r["response"]}]}) + "\n"
                            for r in rows))
    with path.open("rb") as f:
        train = oai.files.create(file=f, purpose="fine-tune")
    since = time.time()
    job = oai.fine_tuning.jobs.create(model=demo["model"], training_file=train.id, method={
        "type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 1, "batch_size": 16}}})
    seen, deadline = set(), time.monotonic() + 300
    while job.status not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, job.status
        job = oai.fine_tuning.jobs.retrieve(job.id)  # raised (a 500) while running before the UTC column type
        seen.add(job.status)
        time.sleep(0.05)
    assert job.status == "succeeded", job.error
    assert "running" in seen
    _near_now(job.created_at, since)
    _near_now(job.finished_at, since)
    assert job.created_at <= job.finished_at


def test_trainer_then_job_is_dispatched(stack, http, demo, files):
    """The trainer's actor holds every CPU of the local Ray (`keel up`'s: as many as the host has) until
    its idle release, which the trainer sweeper does: it raised on SQLite's naive timestamps, and every
    later job waited for ever."""
    from keel_client import training
    from keel_client.training import types

    since = time.time()
    service = training.ServiceClient(base_url=stack.url, api_key=stack.key, timeout=120.0)
    try:
        trainer = service.create_lora_training_client(demo["model"], rank=4, alpha=8, seed=1, idle_timeout_s=2,
                                                      resources={"num_cpus": float(os.cpu_count())})
        ids = list(range(3, 19))
        data = [types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                            loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)})]
        trainer.forward_backward(data, "cross_entropy").result()
        assert trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result().step == 1
        job = http.post("/v1/jobs", json={"model": demo["model"], "training_file": files["sft_train"],
                                          "method": TINY_SFT}).raise_for_status().json()
        done = _wait(http, job["id"], ("succeeded", "failed", "cancelled"), timeout=180)
        assert done["status"] == "succeeded", done["error"]
        info = trainer.get_info()
        assert info["status"] == "idle" and info["released_at"] is not None, info
        _near_now(info["last_used_at"], since)
        _near_now(info["released_at"], since)
        assert done["started_at"] >= info["released_at"]  # the job could start only once the trainer let go
    finally:
        for t in service._http.request("GET", "/v1/trainers", params={"limit": 100})["data"]:
            if t["status"] != "deleted":
                service._http.request("DELETE", f"/v1/trainers/{t['id']}")
        service.close()


def test_running_job_polls_stream_pause_resume_cancel(http, demo, files):
    since = time.time()
    job_id = http.post("/v1/jobs", json={"model": demo["model"], "training_file": files["sft_train"],
                                         "method": LONG_SFT}).raise_for_status().json()["id"]
    deadline = time.monotonic() + 180
    while True:
        job = http.get(f"/v1/jobs/{job_id}").raise_for_status().json()
        if job["status"] == "running" and (job["progress"]["step"] or 0) >= 1:
            break
        assert job["status"] in ("queued", "running") and time.monotonic() < deadline, job
        time.sleep(0.2)

    # 200 polls while it runs: its progress (an estimate from started_at) raised on SQLite.
    errors, remaining = [], []
    for i in range(200):
        path = (f"/v1/jobs/{job_id}", "/v1/jobs", f"/v1/fine_tuning/jobs/{job_id}")[i % 3]
        r = http.get(path)
        if r.status_code != 200:
            errors.append((path, r.status_code, r.text[:200]))
        elif path == f"/v1/jobs/{job_id}":
            assert r.json()["status"] == "running"
            remaining.append(r.json()["progress"]["seconds_remaining"])
    assert errors == []
    assert any(s is not None for s in remaining)
    job = http.get(f"/v1/jobs/{job_id}").json()
    _near_now(job["created_at"], since)
    _near_now(job["started_at"], since)

    # The event stream (SSE) replays the job's history and follows it.
    events = []
    with http.stream("GET", f"/v1/jobs/{job_id}/events/stream", timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line.removeprefix("data:")))
                if any(e["type"] == "job.metrics" for e in events):
                    break
    assert events[0]["type"] == "job.status" and any(e["type"] == "job.metrics" for e in events)
    _near_now(events[0]["created_at"], since)

    assert http.post(f"/v1/jobs/{job_id}/pause").status_code == 200
    assert _wait(http, job_id, ("paused", "failed", "cancelled", "succeeded"), 180)["status"] == "paused"
    assert http.post(f"/v1/jobs/{job_id}/resume").status_code == 200
    resumed = _wait(http, job_id, ("running", "failed", "cancelled", "succeeded"), 180)
    assert resumed["status"] == "running", resumed["error"]
    assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert _wait(http, job_id, ("cancelled", "failed", "succeeded"), 180)["status"] == "cancelled"


def test_a_serving_replica_counts_in_admission(stack, http, demo, files):
    """Jobs and Serve share `keel up`'s one Ray. Idle, Serve holds no CPU (the jobs above had them all);
    while a replica of the demo model is up, the capacity the worker publishes lacks its CPU
    (`KEEL_SERVE_REPLICA_CPUS`: 1) and a job needing every CPU waits for resources. On a Ray of Serve's
    own, as before, that job ran at once."""
    import sqlite3
    from contextlib import closing

    def published() -> tuple[float, float]:  # the cluster_node rows the API's admission reads
        with closing(sqlite3.connect(stack.home / "keel.db")) as db:
            return db.execute("SELECT sum(cpus_total), sum(cpus_available) FROM cluster_node").fetchone()

    chat = {"model": demo["model"], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = http.post("/v1/chat/completions", json=chat, timeout=180)  # its first request starts a replica
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 60
    while (held := published())[0] - held[1] != 1.0:
        assert time.monotonic() < deadline, held
        time.sleep(0.5)
    total = int(held[0])
    job = http.post("/v1/jobs", json={"model": demo["model"], "training_file": files["sft_train"],
                                      "method": TINY_SFT, "resources": {"cpus_per_worker": total}})
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    try:
        for _ in range(20):  # 10 s: the sweeper and the worker's claim both looked more than once
            seen = http.get(f"/v1/jobs/{job_id}").raise_for_status().json()
            assert seen["status"] == "queued", seen
            time.sleep(0.5)
        assert seen["queue_reason"] == "waiting_for_resources", seen
        assert http.post("/v1/chat/completions", json=chat, timeout=60).status_code == 200  # still served
    finally:
        http.post(f"/v1/jobs/{job_id}/cancel")


def test_ctrl_c_stops_quietly(stack):
    """Last: SIGINT to `keel up` (Ctrl-C) ends it at once with a short message: no traceback, no stack
    dump from Ray's signal handler, no deprecation banner. Its banner names the console and the docs."""
    assert stop(stack) == 0
    out = stack.output()
    assert f"console: {stack.url}/\n" in out and f"docs:    {stack.url}/docs" in out
    assert "Keel stopped." in out
    for noise in ("Traceback", "SIGTERM received", "DeprecationWarning", "Aborted!"):
        assert noise not in out, out[-3000:]
