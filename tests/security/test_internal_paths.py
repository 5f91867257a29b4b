"""Issue 27, item 12: tenants never read the deployment's paths in events (a job's log had said "saved
the policy (hf) to /.../artifacts/jobs/<id>/output"), and a hub-id-shaped `model` that exists relative to
a model root or the artifact store (`job-<another project's job>/output`) is refused."""

from __future__ import annotations

import dataclasses
import json
import secrets

import pytest
import security_support
from sqlalchemy import select

from core.config import settings
from core.db import session_scope
from core.models import Checkpoint
from tests.workers.factories import add_file, add_running_job

jobs_api = security_support.api_jobs()


def test_a_tiny_job_s_events_name_no_internal_path(client, auth, project_key, tmp_path):
    """SFT in this process, reporting through the workers' reporter to the job's event log, with its output
    and checkpoints in the artifact store; then a resume from its checkpoint; read back through the API."""
    from engine.config import JobRequest, Resources, SFTConfig, build_config
    from engine.demo import build_demo_assets
    from engine.methods.sft import run_sft
    from workers.reporter import DBReporter
    from workers.resolve import job_dirs

    assets = build_demo_assets(tmp_path / "demo")
    job_id = add_running_job(project_key[0], add_file(project_key[0]))
    output_dir, checkpoint_dir = job_dirs(job_id)
    cfg = build_config(SFTConfig, {
        "data": {"train_batch_size": 16, "max_prompt_length": 32, "max_response_length": 32},
        "trainer": {"total_training_steps": 2, "save_freq": 1, "test_freq": -1}, "max_token_len_per_gpu": 256})
    request = JobRequest(job_id=job_id, method="sft", config=cfg, model_path=assets["model"],
                         training_file=assets["sft_train"], validation_file=None, output_dir=output_dir,
                         checkpoint_dir=checkpoint_dir, seed=1, resources=Resources(num_workers=1))
    reporter = DBReporter(job_id, settings.database_url, attempt=1)
    run_sft(request, reporter)
    with session_scope() as db:
        first = db.scalar(select(Checkpoint.path).where(Checkpoint.job_id == job_id, Checkpoint.step == 1))
    run_sft(dataclasses.replace(request, resume_from=first), reporter)

    events = client.get(f"/v1/jobs/{job_id}/events", params={"limit": 100}, headers=auth).json()["data"]
    logs = [e["data"]["message"] for e in events if e["type"] == "job.log"]
    assert any(m.startswith("saved the ") for m in logs) and any(m.startswith("resumed from ") for m in logs)
    text = json.dumps(events)
    for internal in {str(settings.home), settings.storage_url}:
        assert internal not in text
    assert f"resumed from jobs/{job_id}/checkpoints/step_1 at step 1" in logs  # the checkpoint by its key


@pytest.fixture
def other_projects_output(keel_home) -> str:
    """Another project's job output in the artifact store, and a directory under the model root, both
    named like hub ids relative to where they lie."""
    from core.storage import get_storage

    job = f"job-{secrets.token_hex(6)}"
    output = get_storage().local_path(f"jobs/{job}/output")
    output.mkdir(parents=True)
    (output / "config.json").write_text("{}")
    org = f"org{secrets.token_hex(3)}"
    (keel_home / "models" / org / "name").mkdir(parents=True)
    return job, org


def test_a_model_name_relative_to_a_root_is_not_a_hub_id(client, auth, db, project_key, other_projects_output):
    from engine.errors import ModelNotAllowed
    from workers.resolve import allowed_model_roots, resolve_model

    job, org = other_projects_output
    files = {"preference": jobs_api.make_file(db, project_key[0], "preference")}
    for name in (f"{job}/output", f"{org}/name"):
        body = {**jobs_api.rm_body(files), "model": name}
        r = client.post("/v1/jobs", json=body, headers=auth)
        assert r.status_code == 422 and r.json()["param"] == "model", r.text
        with pytest.raises(ModelNotAllowed):  # and the worker, should one be in a spec already
            resolve_model(db, project_key[0], name, allowed_model_roots(), "model")
    assert resolve_model(db, project_key[0], "org/name-not-here", allowed_model_roots(), "model") == "org/name-not-here"
