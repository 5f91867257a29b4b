"""The service's side of a remote artifact store (`KEEL_STORAGE_URL=s3://...`, moto's server): uploads
through the API, checkpoint downloads, and job resolution to URLs instead of node-local paths."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.config import settings
from core.db import session_scope
from core.ids import new_id
from core.models import Checkpoint, File, Job, Model
from core.storage import get_storage
from engine.runtime.artifacts import Artifacts, join

PAIRS = [{"prompt": f"What is {i} + {i}?", "chosen": f"{2 * i}.", "rejected": "No idea."} for i in range(8)]


def _parquet(rows) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


@pytest.fixture
def s3_store(bucket, monkeypatch) -> str:
    """The service's settings pointed at `<bucket>/keel`; yields that URL."""
    url = f"{bucket}/keel"
    monkeypatch.setattr(settings, "STORAGE_URL", url)
    monkeypatch.setattr(settings, "STORAGE_OPTIONS", {})
    assert not get_storage().is_local
    return url


def _objects(url: str) -> list[str]:
    fs, path = get_storage().resolve(url)
    return sorted(p[len(path):].lstrip("/") for p in fs.find(path))


def test_files_api_on_s3(client, auth, project_key, s3_store, monkeypatch):
    project_id = project_key[0]
    data = _parquet(PAIRS)
    r = client.post("/v1/files", headers=auth, data={"purpose": "preference"},
                    files={"file": ("pairs.parquet", data)})
    assert r.status_code == 201, r.text
    file_id = r.json()["id"]
    assert r.json()["rows"] == len(PAIRS)
    assert _objects(s3_store) == [f"files/{project_id}/{file_id}"]
    assert client.get(f"/v1/files/{file_id}/content", headers=auth).content == data
    preview = client.get(f"/v1/files/{file_id}/preview", params={"limit": 2}, headers=auth).json()
    assert [row["prompt"] for row in preview["data"]] == [PAIRS[0]["prompt"], PAIRS[1]["prompt"]]

    # Refused uploads leave no object behind: a bad schema (checked after the upload), too large.
    bad = client.post("/v1/files", headers=auth, data={"purpose": "preference"},
                      files={"file": ("bad.parquet", _parquet([{"prompt": "p", "chosen": 1, "rejected": "r"}]))})
    assert bad.status_code == 422 and bad.json()["code"] == "schema_mismatch"
    monkeypatch.setattr(settings, "MAX_UPLOAD_BYTES", 64 * 1024)
    big = client.post("/v1/files", headers=auth, data={"purpose": "preference"},
                      files={"file": ("big.parquet", b"x" * (6 * 1024 * 1024))})
    assert big.status_code == 413
    assert _objects(s3_store) == [f"files/{project_id}/{file_id}"]

    assert client.delete(f"/v1/files/{file_id}", headers=auth).status_code == 200
    assert _objects(s3_store) == []


def _job(project_id: str, file_id: str, **spec) -> str:
    job_id = new_id("job")
    with session_scope() as db:
        # `succeeded`: a stub row no worker or sweeper of the session ever picks up.
        db.add(Job(id=job_id, project_id=project_id, method="sft", status="succeeded", model=spec.get("model", "x"),
                   training_file_id=file_id,
                   spec={"model": spec.get("model", "x"), "method": {"type": "sft", "hyperparameters": {}},
                         "resources": {"num_workers": 1}, "from_checkpoint": spec.get("from_checkpoint")},
                   progress=spec.get("progress", {})))
    return job_id


def _file(project_id: str) -> str:
    file_id = new_id("file")
    key = f"files/{project_id}/{file_id}"
    with get_storage().writer(key) as f:
        f.write(b'{"prompt": "hi", "response": "hello"}\n')
    with session_scope() as db:
        db.add(File(id=file_id, project_id=project_id, purpose="sft", filename="f.jsonl", bytes=38,
                    sha256=new_id("sha"), format="jsonl", storage_key=key))
    return file_id


def _save_step(root: str, step: int, *, complete: bool = True) -> str:
    store = Artifacts()
    url = join(root, f"step_{step}")
    with store.writing(url, marker="COMPLETE" if complete else None) as local:
        Path(local, "model.safetensors").write_bytes(bytes([step]) * 1000)
        Path(local, "extra.json").write_text(f'{{"step": {step}}}')
    return url


def test_jobs_resolve_to_urls_and_resume_from_recorded_remote_checkpoints(project_key, s3_store):
    from workers.resolve import allowed_model_roots, latest_complete_checkpoint, resolve_request

    project_id = project_key[0]
    file_id = _file(project_id)
    model_id = new_id("model")
    parent = _job(project_id, file_id)
    with session_scope() as db:
        db.add(Model(id=model_id, project_id=project_id, job_id=parent, name="m", kind="policy", format="hf",
                     base_model="x", path=f"{s3_store}/jobs/{parent}/output"))
    job_id = _job(project_id, file_id, model=model_id, progress={"step": 3})
    with session_scope() as db:
        request = resolve_request(db, db.get(Job, job_id))
    assert request.training_file == f"{s3_store}/files/{project_id}/{file_id}"
    assert request.model_path == f"{s3_store}/jobs/{parent}/output"
    assert request.output_dir == f"{s3_store}/jobs/{job_id}/output"
    assert request.checkpoint_dir == f"{s3_store}/jobs/{job_id}/checkpoints"
    assert request.resume_from is None
    assert allowed_model_roots() == tuple(settings.model_roots)  # no node-local path of the store

    root = request.checkpoint_dir
    _save_step(root, 2)
    _save_step(root, 3, complete=False)  # a crash during its upload
    _save_step(root, 4)  # past the event log's last step: its metrics were never recorded
    assert latest_complete_checkpoint(root) == join(root, "step_4")
    assert latest_complete_checkpoint(root, max_step=3) == join(root, "step_2")
    with session_scope() as db:
        assert resolve_request(db, db.get(Job, job_id)).resume_from == join(root, "step_2")
        db.add(Checkpoint(id=new_id("ckpt"), job_id=job_id, project_id=project_id, step=4, path=join(root, "step_4")))
    with session_scope() as db:
        assert resolve_request(db, db.get(Job, job_id)).resume_from == join(root, "step_4")

    # A file whose bytes are gone from the bucket is a user error naming the file.
    get_storage().delete(f"files/{project_id}/{file_id}")
    from engine.errors import EngineError

    with session_scope() as db, pytest.raises(EngineError) as err:
        resolve_request(db, db.get(Job, job_id))
    assert (err.value.code, err.value.param) == ("invalid_reference", "training_file")


def test_checkpoint_download_streams_the_remote_directory(client, auth, project_key, s3_store):
    project_id = project_key[0]
    job_id = _job(project_id, _file(project_id))
    url = _save_step(f"{s3_store}/jobs/{job_id}/checkpoints", 5)
    with Artifacts().writing(join(url, "critic")) as local:  # a nested part, as PPO writes
        Path(local, "model.safetensors").write_bytes(b"c" * 3000)
    ckpt_id = new_id("ckpt")
    with session_scope() as db:
        db.add(Checkpoint(id=ckpt_id, job_id=job_id, project_id=project_id, step=5, path=url))
    with Artifacts().writing(join(url, "critic", "hf")) as local:  # the critic's Hugging Face export
        Path(local, "config.json").write_text("{}")
        Path(local, "model.safetensors").write_bytes(b"h" * 2000)
    r = client.get(f"/v1/checkpoints/{ckpt_id}/content?role=critic&include=training_state", headers=auth)
    assert r.status_code == 200, r.text
    root = f"{ckpt_id}-critic-training-state"
    state = f"{root}/training_state"
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {root, f"{root}/config.json", f"{root}/model.safetensors", state, f"{state}/COMPLETE",
                                f"{state}/critic", f"{state}/extra.json", f"{state}/model.safetensors",
                                f"{state}/critic/model.safetensors"}
        assert tar.extractfile(f"{root}/model.safetensors").read() == b"h" * 2000
        assert tar.extractfile(f"{state}/model.safetensors").read() == bytes([5]) * 1000
        assert tar.extractfile(f"{state}/critic/model.safetensors").read() == b"c" * 3000

    get_storage().resolve(join(url, "COMPLETE"))[0].rm(get_storage().resolve(join(url, "COMPLETE"))[1])
    gone = client.get(f"/v1/checkpoints/{ckpt_id}/content", headers=auth)
    assert gone.status_code == 404 and gone.json()["code"] == "checkpoint_unavailable"


def test_an_aborted_remote_write_publishes_nothing(s3_store):
    storage = get_storage()
    pending = storage.begin_write("files/p/big")
    try:
        pending.file.write(b"x" * (6 * 1024 * 1024))
        pending.file.flush()
    finally:
        pending.abort()
    assert not storage.exists("files/p/big")
    with storage.writer("files/p/small") as f:
        f.write(b"whole")
    with storage.open("files/p/small") as f:
        assert f.read() == b"whole"
