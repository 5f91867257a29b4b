"""Tenants never see internal error text: a job that hits an unexpected exception fails with the code
`internal_error`, a generic message and an error id; the exception, its text and traceback are only
in the worker's log, on a JSON line with that error id and the job id (as every line of the run)."""

from __future__ import annotations

import io
import json

import pytest
from factories import add_file, add_job, events_of, get_job

from core import logging as logcontext
from core.capacity import Admission
from engine.errors import ConfigError, EngineError
from workers import failures, tasks


@pytest.fixture(autouse=True)
def no_ray(monkeypatch):
    """Nothing here reaches Ray (as in test_tasks.py): joining it and its capacity checks are stubbed."""
    monkeypatch.setattr(tasks, "connect", lambda *a, **kw: None)
    monkeypatch.setattr(tasks, "start_publisher", lambda: None)
    monkeypatch.setattr(tasks, "claim_check", lambda job_id, spec: Admission("ok"))


@pytest.fixture
def json_log():
    stream = io.StringIO()
    logcontext.configure("json", "INFO", stream=stream)
    yield stream
    logcontext.configure()


LEAKS = ("TypeError", "not iterable", "Traceback", "resolve", ".py")


def test_an_internal_error_shows_a_code_a_message_and_an_error_id_only(project_id, json_log):
    # A stored spec no API would write: resolving it raises a TypeError deep inside the worker.
    job = add_job(project_id, add_file(project_id), hyperparameters=5)
    assert tasks.run_job(job) == "failed: internal_error"

    row = get_job(job)
    error = row.error
    assert error["code"] == "internal_error" and error["error_id"].startswith("err_")
    assert error["message"] == ("The job stopped because of an internal error. "
                                f"Quote error id {error['error_id']} when reporting it.")
    events = [(e.type, e.data) for e in events_of(job)]
    assert ("job.error", error) in events
    shown = json.dumps(error) + json.dumps(events)
    assert not [leak for leak in LEAKS if leak in shown], shown

    lines = [json.loads(line) for line in json_log.getvalue().splitlines() if line.strip()]
    assert lines and all(line["job_id"] == job and "request_id" in line for line in lines), lines
    detail = [line for line in lines if line.get("error_id") == error["error_id"]]
    assert len(detail) == 1 and detail[0]["level"] == "ERROR"
    assert "TypeError" in detail[0]["message"] and "TypeError" in detail[0]["exc_info"]
    assert "Traceback" in detail[0]["exc_info"]


def test_the_api_shows_the_error_id(project_id, client, db):
    from sqlalchemy import select

    from core.models import ApiKey, Job, Project
    from core.security import create_api_key

    job = add_job(project_id, add_file(project_id), hyperparameters=5)
    tasks.run_job(job)
    row = db.get(Job, job)  # mend the spec the API must render (the error stays as the worker wrote it)
    row.spec = {**row.spec, "method": {"type": "sft", "hyperparameters": {}}}
    key = create_api_key(db, db.get(Project, project_id))
    db.commit()
    assert db.scalar(select(ApiKey.id).where(ApiKey.project_id == project_id))
    body = client.get(f"/v1/jobs/{job}", headers={"Authorization": f"Bearer {key}"}).json()
    assert body["error"]["code"] == "internal_error" and body["error"]["error_id"] == get_job(job).error["error_id"]
    assert "TypeError" not in json.dumps(body)


@pytest.mark.parametrize("err, code", [
    (RuntimeError("psycopg.OperationalError: connection to server at 10.0.3.7 port 5432 failed"), "internal_error"),
    (EngineError("the job controller died: node 10.0.3.7 (ip-10-0-3-7.internal) was lost", code="worker_lost"),
     "worker_lost"),
    (EngineError("the job controller failed: ray::JobController.run() File \"/app/engine/runtime/jobs.py\"",
                 code="internal_error"), "internal_error"),
    (EngineError("could not reserve 4 workers: PlacementGroup pending on 10.0.3.7", code="resources_unavailable"),
     "resources_unavailable"),
    (EngineError("something new and unclassified at /srv/keel", code="brand_new_code"), "brand_new_code"),
])
def test_system_errors_are_generic(err, code, caplog):
    error = failures.public_error("job-x", err)
    assert error["code"] == code and error["error_id"].startswith("err_")
    assert "10.0.3.7" not in error["message"] and "/app" not in error["message"] and "/srv" not in error["message"]
    assert any(error["error_id"] in r.getMessage() and str(err) in r.getMessage() for r in caplog.records)


def test_user_errors_keep_their_wording():
    err = ConfigError("optim.lr has an invalid value 'abc'", param="method.hyperparameters.optim.lr")
    assert failures.public_error("job-x", err) == {"code": "invalid_config", "message": err.message,
                                                    "param": "method.hyperparameters.optim.lr"}
    plain = EngineError("the tokenizer has no EOS token: responses could never stop", code="invalid_model")
    assert failures.public_error("job-x", plain)["message"] == plain.message
