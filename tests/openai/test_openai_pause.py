"""`client.fine_tuning.jobs.pause` / `.resume` / `.cancel` of the official `openai` client on a live Keel
(API + Celery worker + Ray) training the demo model: a running supervised job pauses (`running` until
its checkpoint is saved, then `paused`), resumes to `succeeded` with every step reported once; a
queued job pauses at once and a paused job cancels."""

from __future__ import annotations

import time

import openai
import pyarrow.parquet as pq
import pytest
from openai_support import jsonl

pytestmark = pytest.mark.slow


def _wait(oai, job_id: str, statuses: tuple[str, ...], timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = oai.fine_tuning.jobs.retrieve(job_id)
        if job.status in statuses:
            return job
        time.sleep(0.3)
    raise AssertionError(f"{job_id} still {job.status}")


def test_pause_resume_and_cancel_through_the_client(oai, tmp_path, demo_assets, celery_worker):
    rows = pq.read_table(demo_assets["sft_train"]).to_pylist()[:128]
    chat = [{"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["response"]}]}
            for r in rows]
    train = oai.files.create(file=jsonl(tmp_path, "train.jsonl", chat).open("rb"), purpose="fine-tune")
    # 256 steps: long enough that the pause lands mid-run on a fast quiet machine (32 steps once
    # finished before the pause reached the worker).
    method = {"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 8, "batch_size": 4}}}
    job = oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=train.id, method=method)
    second = oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=train.id, method=method)

    # The worker runs one job at a time: the second waits queued, and pauses at once.
    assert oai.fine_tuning.jobs.pause(second.id).status == "paused"

    _wait(oai, job.id, ("running",))
    deadline = time.monotonic() + 240
    while not [e for e in oai.fine_tuning.jobs.list_events(job.id, limit=100).data if e.type == "metrics"]:
        assert time.monotonic() < deadline, "no step reported"
        time.sleep(0.3)
    pausing = oai.fine_tuning.jobs.pause(job.id)
    assert (pausing.object, pausing.id, pausing.status) == ("fine_tuning.job", job.id, "running")  # OpenAI has no pausing
    paused = _wait(oai, job.id, ("paused", "succeeded", "failed", "cancelled"), 120)
    assert paused.status == "paused", paused.error
    step = oai.get(f"/jobs/{job.id}", cast_to=object)["progress"]["step"]
    # Newest first: the pause's checkpoint is at the step it stopped after (an epoch's end, every 32
    # steps, may have saved one before it on a fast machine).
    saved = [c.step_number for c in oai.fine_tuning.jobs.checkpoints.list(job.id).data]
    assert saved[0] == step and all(s < step for s in saved[1:]), (saved, step)

    assert oai.fine_tuning.jobs.resume(job.id).status == "queued"
    done = _wait(oai, job.id, ("succeeded", "failed", "cancelled"))
    assert done.status == "succeeded", done.error
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.jobs.pause(job.id)
    assert err.value.code == "job_not_running" and err.value.param == "job_id"
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.jobs.resume(job.id)
    assert err.value.code == "job_not_paused"

    events = list(oai.fine_tuning.jobs.list_events(job.id, limit=100))  # every page
    metrics = [e.data for e in reversed(events) if e.type == "metrics"]
    total = metrics[-1]["total_steps"]
    assert total > step and [m["step"] for m in metrics] == list(range(1, total + 1))  # each once, across the pause

    assert oai.fine_tuning.jobs.cancel(second.id).status == "cancelled"
    assert oai.fine_tuning.jobs.retrieve(second.id).status == "cancelled"
