"""Admission control at create time: a job bigger than the Ray cluster (as the workers published it)
or than the deployment caps is a 422 naming the field, and nothing is stored or sent; one that fits the
cluster but not its free capacity is accepted, kept queued with `queue_reason` and not sent (the
sweeper sends it when there is room)."""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy import delete, func, select, update

from core.capacity import Node, publish
from core.config import settings
from core.models import ClusterNode, File, Job


@pytest.fixture
def busy_cluster(db):
    """A published node of 8 CPUs, all taken, beside whatever else the session's workers published."""
    source = f"test:{secrets.token_hex(4)}"
    publish(db, source, [Node(f"node-{secrets.token_hex(6)}", "10.0.0.9", cpus_total=8, cpus_available=0,
                              gpus_total=0, gpus_available=0)])
    yield
    db.rollback()
    db.execute(delete(ClusterNode).where(ClusterNode.source == source))
    db.commit()


@pytest.fixture
def sft_file(db, project_key) -> str:
    f = File(project_id=project_key[0], purpose="sft", filename="sft.parquet", bytes=10, sha256=secrets.token_hex(32),
             format="parquet", storage_key=f"files/{secrets.token_hex(4)}")
    db.add(f)
    db.commit()
    return f.id


def body(file_id: str, **resources) -> dict:
    return {"model": "org/name", "training_file": file_id, "method": {"type": "sft"}, "resources": resources}


def jobs_of(db, project_id: str) -> int:
    return db.scalar(select(func.count()).select_from(Job).where(Job.project_id == project_id))


def test_more_gpus_than_the_cluster_has_is_a_422(client, auth, db, project_key, sft_file, busy_cluster, dispatched):
    r = client.post("/v1/jobs", headers=auth, json=body(sft_file, gpus_per_worker=64))
    assert r.status_code == 422, r.text
    problem = r.json()
    assert (problem["code"], problem["param"]) == ("resources_exceed_cluster", "resources.gpus_per_worker")
    assert "64 GPUs" in problem["detail"]
    r = client.post("/v1/jobs", headers=auth, json=body(sft_file, num_workers=64, cpus_per_worker=1))
    assert (r.status_code, r.json()["param"]) == (422, "resources.num_workers")
    assert jobs_of(db, project_key[0]) == 0 and dispatched == []


def test_the_deployment_caps_are_a_422(client, auth, db, project_key, sft_file, dispatched, monkeypatch):
    monkeypatch.setattr(settings, "MAX_JOB_GPUS", 2.0)
    monkeypatch.setattr(settings, "MAX_JOB_CPUS", 4.0)
    r = client.post("/v1/jobs", headers=auth, json=body(sft_file, num_workers=2, gpus_per_worker=2))
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (
        422, "resources_over_limit", "resources.gpus_per_worker")
    r = client.post("/v1/jobs", headers=auth, json=body(sft_file, num_workers=3, cpus_per_worker=2))
    assert (r.status_code, r.json()["param"]) == (422, "resources.cpus_per_worker")
    assert "KEEL_MAX_JOB_CPUS" in r.json()["detail"]
    assert jobs_of(db, project_key[0]) == 0 and dispatched == []
    r = client.post("/v1/jobs", headers=auth, json=body(sft_file, num_workers=2, cpus_per_worker=2))
    assert r.status_code == 201, r.text  # at the caps exactly


def test_a_job_that_fits_the_cluster_but_not_its_free_capacity_waits(client, auth, db, sft_file, busy_cluster,
                                                                      dispatched):
    r = client.post("/v1/jobs", headers=auth, json=body(sft_file, cpus_per_worker=6))
    assert r.status_code == 201, r.text
    job = r.json()
    assert (job["status"], job["queue_reason"], job["attempts"]) == ("queued", "waiting_for_resources", 0)
    assert dispatched == []  # the sweeper sends it when there is room
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth).json()["queue_reason"] == "waiting_for_resources"
    db.execute(update(Job).where(Job.id == job["id"]).values(status="cancelled"))
    db.commit()
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth).json()["queue_reason"] is None
