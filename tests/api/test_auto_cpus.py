"""`resources.cpus_per_worker: auto` (the default) is resolved by the API when the job is created, from the
capacity the workers published, and the job holds the number; explicit numbers are kept; the cap is the
deployment's KEEL_AUTO_CPUS_PER_WORKER_MAX (1 in this test session, raised here)."""

from __future__ import annotations

import json
import secrets

import pytest
from sqlalchemy import delete, select

from core.capacity import Node, publish
from core.config import settings
from core.models import ClusterNode, File, Job

NODE_CPUS = 12
"""More than any node the session's own workers publish (their local Ray has 2)."""


@pytest.fixture
def idle_node(db):
    """A published idle node of NODE_CPUS CPUs and 2 GPUs, beside whatever the session's workers published."""
    source = f"test:{secrets.token_hex(4)}"
    publish(db, source, [Node(f"node-{secrets.token_hex(6)}", "10.0.0.7", cpus_total=NODE_CPUS,
                              cpus_available=NODE_CPUS, gpus_total=2, gpus_available=2)])
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


def create(client, auth, file_id: str, resources: dict | None = None, **query):
    body = {"model": "org/name", "training_file": file_id, "method": {"type": "sft"}}
    if resources is not None:
        body["resources"] = resources
    return client.post("/v1/jobs", headers=auth, json=body, params=query)


def stored(db, job_id: str) -> float:
    db.expire_all()
    return db.scalar(select(Job.spec).where(Job.id == job_id))["resources"]["cpus_per_worker"]


def test_the_default_resolves_to_the_node_and_is_stored(client, auth, db, sft_file, idle_node, awaiting_dispatch,
                                                        monkeypatch):
    monkeypatch.setattr(settings, "AUTO_CPUS_PER_WORKER_MAX", 16)
    r = create(client, auth, sft_file)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["resources"]["cpus_per_worker"] == NODE_CPUS
    assert stored(db, job["id"]) == NODE_CPUS  # what admission, the workers and the engine read
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth).json()["resources"]["cpus_per_worker"] == NODE_CPUS
    assert awaiting_dispatch(job["id"])  # admitted on the resolved number (the node is idle): not waiting

    explicit_auto = create(client, auth, sft_file, {"cpus_per_worker": "auto", "num_workers": 2})
    assert explicit_auto.status_code == 201, explicit_auto.text
    assert explicit_auto.json()["resources"]["cpus_per_worker"] == NODE_CPUS / 2

    for value in (3, 0.5, 1024):  # explicit numbers are kept, whatever the cluster
        r = create(client, auth, sft_file, {"cpus_per_worker": value})
        if value > NODE_CPUS:  # ...and admitted or refused as they are
            assert (r.status_code, r.json()["param"]) == (422, "resources.cpus_per_worker")
            continue
        assert r.status_code == 201 and r.json()["resources"]["cpus_per_worker"] == value, r.text

    gpu = create(client, auth, sft_file, {"gpus_per_worker": 1})
    assert gpu.status_code == 201, gpu.text
    assert gpu.json()["resources"]["cpus_per_worker"] == 1  # GPU jobs are placed by their GPUs


def test_the_cap_is_the_deployments_knob(client, auth, db, sft_file, idle_node, dispatched, monkeypatch):
    monkeypatch.setattr(settings, "AUTO_CPUS_PER_WORKER_MAX", 5)
    assert create(client, auth, sft_file).json()["resources"]["cpus_per_worker"] == 5
    monkeypatch.setattr(settings, "AUTO_CPUS_PER_WORKER_MAX", 1)
    job = create(client, auth, sft_file).json()
    assert job["resources"]["cpus_per_worker"] == 1 and stored(db, job["id"]) == 1
    monkeypatch.setattr(settings, "AUTO_CPUS_PER_WORKER_MAX", 16)
    monkeypatch.setattr(settings, "MAX_JOB_CPUS", 4.0)  # the per-job cap bounds it too
    assert create(client, auth, sft_file).json()["resources"]["cpus_per_worker"] == 4


def test_dry_run_resolves_before_planning(client, auth, sft_file, idle_node, dispatched, monkeypatch):
    monkeypatch.setattr(settings, "AUTO_CPUS_PER_WORKER_MAX", 16)
    r = create(client, auth, sft_file, dry_run="true")
    assert r.status_code == 200 and r.json()["object"] == "memory_plan", r.text
    assert dispatched == []


@pytest.mark.parametrize("value", ["fast", "2", "", None, True, 0, -1, 2000])
def test_anything_else_is_a_422_naming_the_field(client, auth, db, project_key, sft_file, dispatched, value):
    r = create(client, auth, sft_file, {"cpus_per_worker": value})
    assert r.status_code == 422, r.text
    problem = r.json()
    assert r.headers["content-type"].startswith("application/problem+json")
    assert (problem["code"], problem["param"]) == ("invalid_request", "resources.cpus_per_worker")
    assert "'auto'" in problem["detail"]
    assert db.scalar(select(Job.id).where(Job.project_id == project_key[0])) is None and dispatched == []


def test_openai_fine_tuning_jobs_resolve_it_too(client, auth, idle_node, dispatched, monkeypatch):
    monkeypatch.setattr(settings, "AUTO_CPUS_PER_WORKER_MAX", 16)
    chat = [{"messages": [{"role": "user", "content": f"What is {i} + 1?"},
                          {"role": "assistant", "content": str(i + 1)}]} for i in range(4)]
    data = "".join(json.dumps(row) + "\n" for row in chat).encode()
    upload = client.post("/v1/files", headers=auth, data={"purpose": "fine-tune"},
                         files={"file": ("chat.jsonl", data)})
    assert upload.status_code == 201, upload.text
    r = client.post("/v1/fine_tuning/jobs", headers=auth, json={"model": "org/name", "training_file": upload.json()["id"]})
    assert r.status_code == 200, r.text
    job = client.get(f"/v1/jobs/{r.json()['keel_job']}", headers=auth).json()
    assert job["resources"]["cpus_per_worker"] == NODE_CPUS
