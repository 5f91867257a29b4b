"""Integrations on the job spec, mirrored from the event log by the workers (`workers.integrations`):
W&B in offline mode (its run file read back), TensorBoard (event files read back with TensorBoard's
own reader, and downloadable from the API), MLflow on a local file store; and the project secrets
they take their credentials from (write-only)."""

from __future__ import annotations

import io
import secrets
import struct
import tarfile
import time
from pathlib import Path

import pytest
from sqlalchemy import select, update

from core.config import settings
from core.db import session_scope
from core.events import append_event
from core.integrations import tensorboard_key
from core.models import File, Job, JobEvent, ProjectSecret
from core.security import create_api_key, get_or_create_project
from core.storage import get_storage
from tests.workers.factories import add_file, add_job
from workers.integrations import IntegrationMirror

STEPS = {1: {"train/loss": 2.0, "actor/pg_loss": 0.5}, 2: {"train/loss": 1.5}, 3: {"train/loss": 1.0}}


@pytest.fixture
def admin_auth(database) -> tuple[str, dict[str, str]]:
    with session_scope() as db:
        project, _ = get_or_create_project(db, f"intg-{secrets.token_hex(4)}")
        return project.id, {"Authorization": f"Bearer {create_api_key(db, project, admin=True)}"}


def job_with(project_id: str, integrations: list[dict]) -> str:
    job_id = add_job(project_id, add_file(project_id), status="succeeded")
    with session_scope() as db:
        job = db.get(Job, job_id)
        db.execute(update(Job).where(Job.id == job_id).values(spec={**job.spec, "integrations": integrations}))
    return job_id


def run_job_events(job_id: str, status: str = "succeeded") -> None:
    with session_scope() as db:
        append_event(db, job_id, "job.status", {"status": "running"})
        for step, values in STEPS.items():
            append_event(db, job_id, "job.metrics", {"step": step, "total_steps": 3, "values": values})
            append_event(db, job_id, "job.log", {"message": f"step {step}"})
        append_event(db, job_id, "job.done", {"status": status})


def mirror_until_done(job_id: str, timeout: float = 60.0) -> None:
    """Run mirror passes until the job's cursor is done (the session's Celery worker, when one runs,
    may hold the job's lease and do the work instead: the outcome is the same)."""
    from core.models import EventCursor

    mirror = IntegrationMirror(interval_s=0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mirror.run_once()
        with session_scope() as db:
            if db.scalar(select(EventCursor.done).where(EventCursor.job_id == job_id,
                                                        EventCursor.consumer == "integrations")):
                return
        time.sleep(0.1)
    raise AssertionError("the mirror never finished the job")


def read_wandb_records(path: Path) -> list:
    """The records of a W&B run file (`run-*.wandb`): a 7-byte header, then LevelDB-log framing
    (32 KiB blocks; each piece: CRC32C, little-endian length, type 1 full / 2 first / 3 middle / 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, records, pending = 7, [], b""
    block = 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            break
        piece = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        pending = piece if kind in (1, 2) else pending + piece
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def test_metrics_reach_wandb_tensorboard_and_mlflow_at_their_steps(admin_auth, client, keel_home):
    project_id, auth = admin_auth
    tracking = f"file://{keel_home}/mlruns-{secrets.token_hex(3)}"
    job_id = job_with(project_id, [
        {"type": "wandb", "wandb": {"project": "keel-tests", "name": "rm-run", "entity": None, "tags": ["ci"]}},
        {"type": "tensorboard"},
        {"type": "mlflow", "mlflow": {"tracking_uri": tracking, "experiment": "keel-ci"}}])
    run_job_events(job_id)
    mirror_until_done(job_id)

    # TensorBoard, read back with TensorBoard's own reader.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(get_storage().local_path(tensorboard_key(job_id))))
    accumulator.Reload()
    assert [(s.step, s.value) for s in accumulator.Scalars("train/loss")] == [(1, 2.0), (2, 1.5), (3, 1.0)]
    assert [(s.step, s.value) for s in accumulator.Scalars("actor/pg_loss")] == [(1, 0.5)]

    # MLflow.
    import mlflow

    ml = mlflow.MlflowClient(tracking_uri=tracking)
    experiment = ml.get_experiment_by_name("keel-ci")
    (run,) = ml.search_runs([experiment.experiment_id])
    assert run.info.run_name == job_id and run.info.status == "FINISHED"
    assert [(m.step, m.value) for m in ml.get_metric_history(run.info.run_id, "train/loss")] == [
        (1, 2.0), (2, 1.5), (3, 1.0)]

    # W&B, offline: the run file holds the run's settings and every step.
    (run_file,) = sorted((settings.home / "integrations" / job_id).glob("wandb/offline-run-*/run-*.wandb"))
    records = read_wandb_records(run_file)
    runs = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert runs[0].project == "keel-tests" and runs[0].display_name == "rm-run" and list(runs[0].tags) == ["ci"]
    history = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
            history.append((int(items["_step"]), float(items["train/loss"])))
    assert history == [(1, 2.0), (2, 1.5), (3, 1.0)]

    # The TensorBoard logs download as a tar.
    r = client.get(f"/v1/jobs/{job_id}/tensorboard", headers=auth)
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        names = tar.getnames()
    assert any("events.out.tfevents" in n for n in names), names


def test_a_job_without_integrations_is_left_alone(admin_auth, client):
    project_id, auth = admin_auth
    job_id = job_with(project_id, [])
    run_job_events(job_id)
    IntegrationMirror(interval_s=0).run_once()
    assert not (settings.home / "integrations" / job_id).exists()
    r = client.get(f"/v1/jobs/{job_id}/tensorboard", headers=auth)
    assert r.status_code == 404 and r.json()["code"] == "tensorboard_unavailable"


def test_a_failing_tracker_is_dropped_with_a_warning_and_the_others_go_on(admin_auth, monkeypatch, tmp_path):
    project_id, _ = admin_auth
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")  # MLflow cannot make its store under a file
    monkeypatch.setattr(settings, "MLFLOW_TRACKING_URI_PREFIXES", [f"file://{tmp_path}"])
    job_id = job_with(project_id, [{"type": "tensorboard"},
                                   {"type": "mlflow", "mlflow": {"tracking_uri": f"file://{blocker}/mlruns",
                                                                 "experiment": "x"}}])
    run_job_events(job_id)
    mirror_until_done(job_id)
    with session_scope() as db:
        warnings = [e.data for e in db.scalars(select(JobEvent).where(JobEvent.job_id == job_id,
                                                                      JobEvent.type == "job.warning"))]
    assert [w["data"]["integration"] for w in warnings] == ["mlflow"]
    assert warnings[0]["code"] == "integration_failed"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(get_storage().local_path(tensorboard_key(job_id))))
    accumulator.Reload()
    assert [s.step for s in accumulator.Scalars("train/loss")] == [1, 2, 3]


# --- the job spec -------------------------------------------------------------------------------------

def _job_body(db, project_id: str, integrations: list[dict]) -> dict:
    file = File(project_id=project_id, purpose="sft", filename="sft.jsonl", bytes=10, sha256=secrets.token_hex(32),
                format="jsonl", storage_key=f"files/{secrets.token_hex(4)}")
    db.add(file)
    db.commit()
    return {"model": "org/name", "training_file": file.id, "method": {"type": "sft"}, "integrations": integrations}


def test_job_create_accepts_and_shows_integrations(client, admin_auth, db, monkeypatch):
    from workers import dispatch

    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: True)
    project_id, auth = admin_auth
    integrations = [{"type": "wandb", "wandb": {"project": "p", "name": None, "entity": "team", "tags": ["a"]}},
                    {"type": "tensorboard", "wandb": None, "mlflow": None}]
    r = client.post("/v1/jobs", headers=auth, json=_job_body(db, project_id, integrations))
    assert r.status_code == 201, r.text
    shown = r.json()["integrations"]
    assert shown[0]["type"] == "wandb" and shown[0]["wandb"]["project"] == "p" and shown[1]["type"] == "tensorboard"
    assert client.get(f"/v1/jobs/{r.json()['id']}", headers=auth).json()["integrations"] == shown
    client.post(f"/v1/jobs/{r.json()['id']}/cancel", headers=auth)


@pytest.mark.parametrize(("integrations", "param"), [
    ([{"type": "wandb"}], "integrations.0"),
    ([{"type": "tensorboard", "wandb": {"project": "p"}}], "integrations.0"),
    ([{"type": "wandb", "wandb": {"project": "p", "api_key": "x"}}], "integrations.0.wandb.api_key"),
    ([{"type": "tensorboard"}, {"type": "tensorboard"}], "integrations.1.type"),
    ([{"type": "mlflow", "mlflow": {"tracking_uri": "file:///etc/mlruns"}}], "integrations.0.mlflow.tracking_uri"),
    ([{"type": "mlflow", "mlflow": {"tracking_uri": "http://127.0.0.1:5000"}}], "integrations.0.mlflow.tracking_uri"),
    ([{"type": "comet"}], "integrations.0.type"),
])
def test_bad_integrations_are_refused(client, admin_auth, db, monkeypatch, integrations, param):
    monkeypatch.setattr(settings, "WEBHOOK_ALLOW_PRIVATE", False)
    project_id, auth = admin_auth
    r = client.post("/v1/jobs", headers=auth, json=_job_body(db, project_id, integrations))
    assert r.status_code == 422, r.text
    assert r.json()["param"] == param


# --- project secrets ----------------------------------------------------------------------------------

def test_secrets_are_write_only_and_stored_encrypted(client, admin_auth, auth):
    project_id, admin = admin_auth
    value = "wandb-key-" + secrets.token_hex(8)
    r = client.put("/v1/projects/current/secrets/WANDB_API_KEY", headers=admin, json={"value": value})
    assert r.status_code == 200 and value not in r.text and r.json()["name"] == "WANDB_API_KEY"
    r = client.put("/v1/projects/current/secrets/WANDB_API_KEY", headers=admin, json={"value": value + "2"})
    assert r.status_code == 200
    listed = client.get("/v1/projects/current/secrets", headers=admin)
    assert [s["name"] for s in listed.json()["data"]] == ["WANDB_API_KEY"] and value not in listed.text
    with session_scope() as db:
        stored = db.scalar(select(ProjectSecret.value).where(ProjectSecret.project_id == project_id))
    assert value not in stored
    from core.integrations import project_secrets

    with session_scope() as db:
        assert project_secrets(db, project_id, ("WANDB_API_KEY",)) == {"WANDB_API_KEY": value + "2"}
    # Not an admin key: no access; another project: nothing to see.
    assert client.put("/v1/projects/current/secrets/X", headers=auth, json={"value": "v"}).status_code == 403
    assert client.get("/v1/projects/current/secrets", headers=auth).status_code == 403
    assert client.put("/v1/projects/current/secrets/lower", headers=admin, json={"value": "v"}).status_code == 422
    assert client.delete("/v1/projects/current/secrets/WANDB_API_KEY", headers=admin).json()["deleted"] is True
    assert client.get("/v1/projects/current/secrets", headers=admin).json()["data"] == []
    assert client.delete("/v1/projects/current/secrets/WANDB_API_KEY", headers=admin).status_code == 404


def test_the_wandb_key_comes_from_the_project_secret_and_is_never_written_out(admin_auth, client):
    project_id, admin = admin_auth
    value = "k" * 40
    client.put("/v1/projects/current/secrets/WANDB_API_KEY", headers=admin, json={"value": value})
    job_id = job_with(project_id, [{"type": "wandb", "wandb": {"project": "p"}}])
    run_job_events(job_id)
    mirror_until_done(job_id)
    files = [p for p in (settings.home / "integrations" / job_id).rglob("*") if p.is_file()]
    assert files and not any(value.encode() in p.read_bytes() for p in files)
    assert value not in client.get(f"/v1/jobs/{job_id}", headers=admin).text
