"""The generated SDK and its stream helper against a real server (uvicorn on loopback).

Without a worker the dispatcher is a recorder, and the test plays the worker by appending events;
`test_end_to_end_training_job` runs a real tiny SFT job on the Celery worker + Ray fixture."""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from pathlib import Path

import httpx
import pytest
from keel_client import JobFailed, StreamError, stream_events, wait_for_job
from keel_client.api.checkpoints import download_checkpoint_content, list_job_checkpoints
from keel_client.api.files import list_files, upload_file
from keel_client.api.jobs import cancel_job, create_job, list_jobs, retrieve_job
from keel_client.models import (
    JobCreate,
    JobPublic,
    Problem,
    UploadFileFileUpload,
    UploadFileFileUploadPurpose,
)
from keel_client.types import File

PAIRS = "".join(json.dumps({"prompt": f"Question {i}?", "chosen": f"Sure, answer {i}.",
                            "rejected": f"No. {i}"}) + "\n" for i in range(8)).encode()


@pytest.fixture
def no_dispatch(monkeypatch):
    """No worker in these tests: record what the API would have sent to the broker."""
    from workers import dispatch

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: calls.append(("enqueue_job", job_id)) or True)
    monkeypatch.setattr(dispatch, "request_cancel", lambda job_id: calls.append(("request_cancel", job_id)) or True)
    return calls


@pytest.fixture
def base_model(keel_home) -> str:
    """A directory under the deployment's model root (queued jobs never load it)."""
    path = keel_home / "models" / "sdk-test-model"
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    return str(path)


def _upload(sdk, data: bytes = PAIRS, name: str = "pairs.jsonl", purpose: str = "preference"):
    body = UploadFileFileUpload(file=File(payload=io.BytesIO(data), file_name=name),
                                purpose=UploadFileFileUploadPurpose(purpose))
    return upload_file.sync_detailed(client=sdk, body=body)


def _job_body(model: str, file_id: str) -> JobCreate:
    return JobCreate.from_dict({"model": model, "training_file": file_id, "method": {
        "type": "reward_model", "hyperparameters": {"data": {"train_batch_size": 4, "max_length": 64},
                                                    "trainer": {"total_training_steps": 2}}}})


def _append(job_id: str, type: str, data: dict) -> None:
    from core.db import session_scope
    from core.events import append_event

    with session_scope() as db:
        append_event(db, job_id, type, data)


def test_upload_create_list_and_idempotency(sdk, base_model, no_dispatch):
    first = _upload(sdk)
    assert first.status_code == 201, first.content
    file = first.parsed
    assert file.purpose.value == "preference" and file.rows == 8 and file.format_.value == "jsonl"
    again = _upload(sdk, name="copy.jsonl")
    assert again.status_code == 200 and again.parsed.id == file.id  # deduplicated by content
    assert file.id in [f.id for f in list_files.sync(client=sdk).data]

    job = create_job.sync(client=sdk, body=_job_body(base_model, file.id), idempotency_key="sdk-idem-1")
    assert isinstance(job, JobPublic) and job.status.value == "queued"
    assert job.method.hyperparameters.data.train_batch_size == 4  # typed all the way down
    replay = create_job.sync(client=sdk, body=_job_body(base_model, file.id), idempotency_key="sdk-idem-1")
    assert replay.id == job.id
    assert no_dispatch == []  # a create publishes nothing (the sweepers send the job), a replay neither
    assert [j.id for j in list_jobs.sync(client=sdk).data] == [job.id]
    assert cancel_job.sync(job.id, client=sdk).status.value == "cancelled"


def test_errors_come_back_as_problems(sdk, no_dispatch):
    missing = retrieve_job.sync_detailed("job-nope", client=sdk)
    assert missing.status_code == 404 and isinstance(missing.parsed, Problem)
    assert missing.parsed.code == "not_found" and missing.parsed.param == "job_id"
    bad = create_job.sync_detailed(client=sdk, body=_job_body("/etc", "file-nope"))
    assert bad.status_code in (404, 422) and isinstance(bad.parsed, Problem) and bad.parsed.param
    with pytest.raises(StreamError) as err:
        list(stream_events(sdk, "job-nope"))
    assert err.value.status == 404 and err.value.problem["code"] == "not_found"


def _queued_job(sdk, base_model) -> str:
    file = _upload(sdk).parsed
    return create_job.sync(client=sdk, body=_job_body(base_model, file.id)).id


def test_stream_follows_a_job_live_to_the_end(sdk, base_model, no_dispatch):
    job_id = _queued_job(sdk, base_model)
    seen: list = []
    reader = threading.Thread(target=lambda: seen.extend(stream_events(sdk, job_id, timeout_s=60)), daemon=True)
    reader.start()
    time.sleep(0.5)  # the reader is connected: what follows arrives live
    for step in (1, 2, 3):
        _append(job_id, "job.metrics", {"step": step, "total_steps": 3, "values": {"critic/loss": 1.0 / step}})
    cancel_job.sync(job_id, client=sdk)  # a queued job is cancelled at once: job.status + job.done
    reader.join(30)
    assert not reader.is_alive(), "the stream ends after job.done"
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert [e.type_.value for e in seen][-5:] == ["job.metrics"] * 3 + ["job.status", "job.done"]
    metrics = [e.data.to_dict() for e in seen if e.type_.value == "job.metrics"]
    assert [m["step"] for m in metrics] == [1, 2, 3] and metrics[0]["values"]["critic/loss"] == 1.0

    resumed = list(stream_events(sdk, job_id, last_event_id=seen[-3].seq))
    assert [e.seq for e in resumed] == [e.seq for e in seen[-2:]]  # after the cursor, nothing repeated

    job = wait_for_job(sdk, job_id, timeout_s=30)
    assert job.status.value == "cancelled"
    with pytest.raises(JobFailed):
        wait_for_job(sdk, job_id, raise_on_failure=True)


class _Flaky(httpx.BaseTransport):
    """Cuts every event stream after its first event (a dropped connection), the first `drops` times."""

    def __init__(self, drops: int) -> None:
        self.inner = httpx.HTTPTransport()
        self.drops = drops
        self.last_event_ids: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if not request.url.path.endswith("/events/stream"):
            return response
        self.last_event_ids.append(request.headers.get("Last-Event-ID"))
        if self.drops <= 0:
            return response
        self.drops -= 1
        upstream = response.stream

        class Cut(httpx.SyncByteStream):
            def __iter__(self):
                buffered = b""
                for chunk in upstream:
                    buffered += chunk
                    if b"\n\n" in buffered:  # one complete event, then the connection "drops"
                        yield buffered[:buffered.index(b"\n\n") + 2]
                        raise httpx.RemoteProtocolError("peer closed connection")
                yield buffered

            def close(self):
                upstream.close()

        return httpx.Response(response.status_code, headers=response.headers, stream=Cut(), request=request)


def test_stream_resumes_with_last_event_id_after_dropped_connections(sdk, base_model, no_dispatch, live_server,
                                                                     project_key):
    from keel_client import AuthenticatedClient

    job_id = _queued_job(sdk, base_model)
    for step in range(1, 5):
        _append(job_id, "job.metrics", {"step": step, "total_steps": 4, "values": {}})
    cancel_job.sync(job_id, client=sdk)
    flaky = _Flaky(drops=3)
    client = AuthenticatedClient(base_url=live_server, token=project_key[1],
                                 httpx_args={"transport": flaky})
    events = list(stream_events(client, job_id, backoff_s=0.01))
    assert [e.seq for e in events] == list(range(1, len(events) + 1)) and events[-1].type_.value == "job.done"
    assert flaky.last_event_ids[:4] == [None, "1", "2", "3"]


def test_checkpoint_listing_and_download(sdk, base_model, no_dispatch, tmp_path):
    from core.db import session_scope
    from core.models import Checkpoint, Job

    job_id = _queued_job(sdk, base_model)
    ckpt_dir = tmp_path / "step_2"
    (ckpt_dir / "actor" / "hf").mkdir(parents=True)  # the Hugging Face export the route serves
    (ckpt_dir / "actor" / "hf" / "model.safetensors").write_bytes(b"\x00\x01" * 1000)
    (ckpt_dir / "actor" / "hf" / "config.json").write_text('{"model_type": "llama"}')
    (ckpt_dir / "actor" / "COMPLETE").write_text("ok")
    (ckpt_dir / "COMPLETE").write_text("ok")
    with session_scope() as db:
        project_id = db.get(Job, job_id).project_id
        ckpt = Checkpoint(job_id=job_id, project_id=project_id, step=2, metrics={"critic/loss": 0.5},
                          path=str(ckpt_dir), bytes=2002)
        db.add(ckpt)
        db.flush()
        ckpt_id = ckpt.id
    page = list_job_checkpoints.sync(job_id, client=sdk)
    assert [c.id for c in page.data] == [ckpt_id] and page.data[0].step == 2
    content = download_checkpoint_content.sync(ckpt_id, client=sdk)
    with tarfile.open(fileobj=content.payload) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "out", filter="data")
    out = tmp_path / "out" / ckpt_id
    assert (out / "model.safetensors").read_bytes() == b"\x00\x01" * 1000, names
    assert json.loads((out / "config.json").read_text()) == {"model_type": "llama"}
    cancel_job.sync(job_id, client=sdk)


@pytest.mark.slow
def test_end_to_end_training_job(sdk, celery_worker, keel_home, tmp_path):
    """Upload the demo SFT data, train a tiny model on the real worker, stream it, download a checkpoint."""
    from engine.demo import build_demo_assets

    assets = build_demo_assets(keel_home / "models" / "sdk-demo")
    data = Path(assets["sft_train"]).read_bytes()
    file = _upload(sdk, data, "sft_train.parquet", "sft").parsed
    body = JobCreate.from_dict({"model": assets["model"], "training_file": file.id, "method": {
        "type": "sft", "hyperparameters": {
            "data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
            "optim": {"lr": 1e-3}, "trainer": {"total_training_steps": 4, "save_freq": 2}}}})
    job = create_job.sync(client=sdk, body=body)
    assert isinstance(job, JobPublic), job
    events: list = []
    done = wait_for_job(sdk, job.id, timeout_s=300, on_event=events.append)
    assert done.status.value == "succeeded", (done.error, [e.to_dict() for e in events[-5:]])
    types = [e.type_.value for e in events]
    assert types[-1] == "job.done" and types.count("job.metrics") == 4 and "job.checkpoint" in types
    assert done.output_model
    ckpts = list_job_checkpoints.sync(job.id, client=sdk).data
    assert ckpts and max(c.step for c in ckpts) == 4
    content = download_checkpoint_content.sync(ckpts[0].id, client=sdk)
    with tarfile.open(fileobj=content.payload) as tar:
        names = tar.getnames()
    assert any(n.endswith(".safetensors") for n in names), names
