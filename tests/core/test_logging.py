"""Log lines: `KEEL_LOG_FORMAT=json` makes every line of `keel api` (uvicorn's own and the access log
included) a JSON object carrying the request's id and, on a job's routes, the job's id; text is the
default outside production and carries the same ids."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from bench.common import free_port
from core import logging as logcontext
from core.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_format_follows_the_environment():
    assert Settings(ENV="development").log_format == "text"
    assert Settings(ENV="test").log_format == "text"
    assert Settings(ENV="production", SECRET_KEY="a-real-secret-0123456789").log_format == "json"
    assert Settings(ENV="production", SECRET_KEY="a-real-secret-0123456789", LOG_FORMAT="text").log_format == "text"
    assert Settings(ENV="development", LOG_FORMAT="json").log_format == "json"


def _lines(fmt: str, emit) -> list[str]:
    stream = io.StringIO()
    logcontext.configure(fmt, "INFO", stream=stream)
    try:
        emit()
    finally:
        logcontext.configure()
    return stream.getvalue().splitlines()


def test_the_context_reaches_every_line_in_both_formats():
    log = logging.getLogger("keel.test")

    def emit():
        log.info("outside")
        with logcontext.context(job_id="job-1"):
            logcontext.bind(request_id="req-1")  # a fresh request inside the job's context
            logcontext.annotate(job_id="job-2")
            log.warning("inside %s", "args", extra={"step": 3})
            try:
                raise ValueError("boom")
            except ValueError:
                log.exception("failed")
        log.info("after")

    out = [json.loads(line) for line in _lines("json", emit) if line.startswith("{")]
    assert [(o["message"], o["request_id"], o["job_id"]) for o in out] == [
        ("outside", None, None), ("inside args", "req-1", "job-2"), ("failed", "req-1", "job-2"),
        ("after", None, None)]
    assert out[1]["step"] == 3 and out[1]["level"] == "WARNING" and out[1]["logger"] == "keel.test"
    assert "ValueError: boom" in out[2]["exc_info"]
    text = _lines("text", emit)
    assert text[0].endswith("keel.test: outside")
    assert text[1].endswith("inside args [request_id=req-1 job_id=job-2]")
    assert "Traceback" in "\n".join(text)


@pytest.mark.slow
def test_keel_api_writes_json_lines_with_request_and_job_ids(database, auth, db, project_key, tmp_path):
    from core.models import File, Job

    file = File(project_id=project_key[0], purpose="preference", filename="p.parquet", bytes=10, sha256="0" * 64,
                format="parquet", storage_key="files/x")
    db.add(file)
    db.flush()
    spec = {"model": "org/name", "training_file": file.id, "method": {"type": "reward_model"}}
    job = Job(project_id=project_key[0], status="cancelled", method="reward_model", spec=spec, model="org/name",
              training_file_id=file.id)
    db.add(job)
    db.commit()
    port = free_port()
    log_file = tmp_path / "api.log"
    env = {**os.environ, "KEEL_LOG_FORMAT": "json", "KEEL_PORT": str(port)}
    with open(log_file, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "keel_cli.main", "api"], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert httpx.get(f"{base}/healthz", headers={"X-Request-ID": "req-health-1"}).status_code == 200
        r = httpx.get(f"{base}/v1/jobs/{job.id}", headers={**auth, "X-Request-ID": "req-job-1"})
        assert r.status_code == 200 and r.headers["X-Request-ID"] == "req-job-1"
        r = httpx.get(f"{base}/v1/jobs/job-nope", headers=auth)
        assert r.status_code == 404
        generated = r.headers["X-Request-ID"]
    finally:
        proc.terminate()
        proc.wait(15)
    raw = [line for line in log_file.read_text().splitlines() if line.strip()]
    lines = [json.loads(line) for line in raw]  # every line is a JSON object
    assert all({"ts", "level", "logger", "message", "request_id", "job_id"} <= set(o) for o in lines)
    access = [o for o in lines if o["logger"] == "uvicorn.access"]
    by_request = {o["request_id"]: o for o in access}
    assert by_request["req-health-1"]["job_id"] is None and "/healthz" in by_request["req-health-1"]["message"]
    assert by_request["req-job-1"]["job_id"] == job.id and job.id in by_request["req-job-1"]["message"]
    assert by_request[generated]["job_id"] is None  # not the caller's job: no id learned
    assert any("Started server process" in o["message"] for o in lines)
