"""Checkpoints over HTTP: a job's list, and the directory as a tar streamed in bounded pieces."""

from __future__ import annotations

import io
import os
import tarfile
from datetime import UTC, datetime, timedelta

import pytest

from core.models import Checkpoint, File, Job


def make_job(db, project_id: str) -> str:
    f = File(project_id=project_id, purpose="preference", filename="p.parquet", bytes=1,
             sha256=os.urandom(16).hex(), format="parquet", storage_key="files/x")
    db.add(f)
    db.flush()
    job = Job(project_id=project_id, status="running", method="reward_model", model="org/name",
              training_file_id=f.id, spec={"method": {"type": "reward_model"}})
    db.add(job)
    db.commit()
    return job.id


@pytest.fixture
def checkpoint_dir(keel_home):
    root = keel_home / "artifacts" / "checkpoints" / os.urandom(4).hex() / "step_20"
    (root / "actor" / "optim").mkdir(parents=True)
    (root / "COMPLETE").write_text("")
    (root / "extra.json").write_text('{"step": 20}')
    (root / "actor" / "model.safetensors").write_bytes(os.urandom(3 * 1024 * 1024 + 123))  # several chunks
    (root / "actor" / "optim" / "state.pt").write_bytes(b"x" * 512)  # exactly one block: no padding
    (root / "outside").symlink_to("/etc/hostname")  # never followed
    return root


@pytest.fixture
def checkpoints(db, project_key, checkpoint_dir):
    job_id = make_job(db, project_key[0])
    now = datetime.now(UTC)
    rows = [Checkpoint(job_id=job_id, project_id=project_key[0], step=step, path=str(checkpoint_dir),
                       metrics={"val/loss": 1.0 / step, "bad": "x"}, bytes=3 * 1024 * 1024,
                       created_at=now + timedelta(seconds=step)) for step in (10, 20, 30)]
    for row in rows:  # ids are time-ordered: insert oldest first
        db.add(row)
        db.flush()
    db.commit()
    return job_id, [r.id for r in rows]


def test_list_checkpoints_newest_first(client, auth, checkpoints):
    job_id, ids = checkpoints
    page = client.get(f"/v1/jobs/{job_id}/checkpoints?limit=2", headers=auth).json()
    assert [c["id"] for c in page["data"]] == [ids[2], ids[1]] and page["has_more"]
    first = page["data"][0]
    assert first == {"id": ids[2], "object": "checkpoint", "job_id": job_id, "step": 30,
                     "metrics": {"val/loss": pytest.approx(1 / 30)}, "bytes": 3 * 1024 * 1024,
                     "created_at": first["created_at"]}
    rest = client.get(f"/v1/jobs/{job_id}/checkpoints?after={page['last_id']}", headers=auth).json()
    assert [c["id"] for c in rest["data"]] == [ids[0]] and not rest["has_more"]


def test_download_streams_a_tar_of_the_directory(client, auth, checkpoints, checkpoint_dir):
    """`include=training_state`: the checkpoint's files under `training_state/` (no export here: a
    checkpoint of an older Keel; `tests/api/test_downloads.py` covers the Hugging Face export)."""
    ckpt = checkpoints[1][1]
    r = client.get(f"/v1/checkpoints/{ckpt}/content?include=training_state", headers=auth)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-tar"
    root = f"{ckpt}-training-state"
    assert r.headers["content-disposition"] == f'attachment; filename="{root}.tar"'
    state = f"{root}/training_state"
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        names = tar.getnames()
        assert names == [root, state, f"{state}/actor", f"{state}/actor/optim", f"{state}/COMPLETE",
                         f"{state}/actor/model.safetensors", f"{state}/actor/optim/state.pt", f"{state}/extra.json"]
        for rel in ("extra.json", "actor/model.safetensors", "actor/optim/state.pt", "COMPLETE"):
            assert tar.extractfile(f"{state}/{rel}").read() == (checkpoint_dir / rel).read_bytes()
        assert tar.getmember(f"{state}/actor").isdir()


def test_the_tar_is_generated_in_bounded_pieces(checkpoint_dir):
    from api import archive
    from core.storage import get_storage

    storage = get_storage()
    pieces = list(archive.stream(storage, archive.files(storage, str(checkpoint_dir)), "c"))
    assert max(len(p) for p in pieces) <= archive.CHUNK
    data = b"".join(pieces)
    assert len(data) % tarfile.BLOCKSIZE == 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tar:  # a streaming reader accepts it too
        assert sum(1 for m in tar if m.isfile()) == 4  # the symlink is left out


def test_missing_files_and_other_projects(client, auth, other_auth, db, checkpoints):
    job_id, ids = checkpoints
    gone = db.get(Checkpoint, ids[0])
    gone.path = "/nonexistent/step_10"
    db.commit()
    r = client.get(f"/v1/checkpoints/{ids[0]}/content", headers=auth)
    assert (r.status_code, r.json()["code"]) == (404, "checkpoint_unavailable")
    for path in (f"/v1/checkpoints/{ids[1]}/content", f"/v1/jobs/{job_id}/checkpoints",
                 "/v1/checkpoints/ckpt-nothing/content"):
        r = client.get(path, headers=other_auth)
        assert (r.status_code, r.json()["code"]) == (404, "not_found"), path
