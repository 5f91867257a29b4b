"""A worker's Prometheus endpoint: its main process reports the jobs its prefork children run (from
their rows: `worker_id` names the child), their step time, throughput and heartbeat age, without
ever labelling a project or a job."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx
import psutil
import pytest
from factories import add_file
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bench.common import free_port
from core.db import session_scope
from core.models import File, Job, Project, utcnow
from workers import metrics

ROOT = Path(__file__).resolve().parents[2]


def parse(text: str) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _value(m, name, **labels) -> float | None:
    return m.get(name, {}).get(tuple(sorted(labels.items())))


def _running(project_id: str, file_id: str, worker_id: str, *, method: str = "sft", age_s: float = 0.0,
             values: dict | None = None, database_url: str | None = None, status: str = "running") -> str:
    with session_scope(database_url) as db:
        job = Job(project_id=project_id, method=method, spec={}, model="org/name", training_file_id=file_id,
                  status=status, attempts=1, worker_id=worker_id, heartbeat_at=utcnow() - timedelta(seconds=age_s),
                  latest_metrics=values or {})
        db.add(job)
        db.flush()
        return job.id


def test_the_collector_reports_this_pools_jobs_only(project_id):
    host = f"host-{secrets.token_hex(3)}"
    f = add_file(project_id)
    mine = {4101, 4102}
    _running(project_id, f, f"{host}:4101:aa", age_s=7, values={"timing_s/step": 0.5, "perf/tokens_per_s": 1000.0})
    _running(project_id, f, f"{host}:4102:bb", method="ppo", age_s=2, status="cancelling",
             values={"timing_s/step": 2.0, "perf/total_num_tokens": 3000.0})
    _running(project_id, f, f"{host}:9999:cc", age_s=300, values={"perf/tokens_per_s": 5.0})  # another worker
    _running(project_id, f, f"{host}x:4101:dd", age_s=300)  # another host, same pid
    _running(project_id, f, f"{host}:4101:ee", status="succeeded", age_s=300)  # finished
    text = generate_latest(metrics.registry(metrics.WorkerCollector(lambda: mine, host=host))).decode()
    m = parse(text)
    assert _value(m, "keel_worker_jobs_running", method="sft") == 1
    assert _value(m, "keel_worker_jobs_running", method="ppo") == 1
    assert _value(m, "keel_worker_jobs_running", method="reward_model") == 0
    assert _value(m, "keel_worker_step_seconds", method="sft") == 0.5
    assert _value(m, "keel_worker_tokens_per_second", method="sft") == 1000.0
    assert _value(m, "keel_worker_tokens_per_second", method="ppo") == 1500.0  # tokens of the step / its time
    assert 6.0 <= _value(m, "keel_worker_heartbeat_age_seconds") < 60
    assert _value(m, "keel_worker_processes") == 2 and _value(m, "keel_worker_database_up") == 1
    assert project_id not in text and host not in text and "job-" not in text
    # No jobs: zeros, not stale values.
    empty = parse(generate_latest(metrics.registry(metrics.WorkerCollector(lambda: {1}, host=host))).decode())
    assert _value(empty, "keel_worker_jobs_running", method="sft") == 0
    assert _value(empty, "keel_worker_heartbeat_age_seconds") == 0 and "keel_worker_step_seconds" not in empty


@pytest.mark.slow
def test_a_prefork_workers_main_process_serves_its_childrens_jobs(tmp_path):
    """A real `celery worker --pool=prefork --concurrency=2` on a database and broker of its own: a job
    claimed by one of its children (its pid in `worker_id`) shows on the main process's endpoint."""
    from core import migrate

    url = f"sqlite:///{tmp_path / 'keel.db'}"
    migrate.upgrade(url)
    port = free_port()
    env = {**os.environ, "KEEL_HOME": str(tmp_path), "KEEL_DATABASE_URL": url, "KEEL_BROKER_URL": "",
           "KEEL_REDIS_URL": "", "KEEL_QUEUE_NAMESPACE": f"metrics{secrets.token_hex(3)}.",
           "KEEL_WORKER_METRICS_PORT": str(port), "KEEL_LOG_FORMAT": "json"}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "--pool=prefork",
                                 "--concurrency=2", "--loglevel=INFO", "--without-gossip", "--without-mingle",
                                 "--without-heartbeat", "-n", f"metrics-{secrets.token_hex(3)}@%h"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and " ready." not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.3)
        children = [c.pid for c in psutil.Process(proc.pid).children()]
        assert len(children) == 2, children
        with session_scope(url) as db:
            project = Project(name="p")
            db.add(project)
            db.flush()
            file = File(project_id=project.id, purpose="sft", filename="f.jsonl", bytes=1, sha256="0" * 64,
                        format="jsonl", storage_key="files/f")
            db.add(file)
            db.flush()
            project_id, file_id = project.id, file.id
        host = socket.gethostname()
        _running(project_id, file_id, f"{host}:{children[0]}:x1", age_s=9, database_url=url,
                 values={"timing_s/step": 1.5, "perf/tokens_per_s": 420.0})
        _running(project_id, file_id, f"{host}:{proc.pid + 10_000_000}:x2", database_url=url)  # not this pool's

        m = parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
        assert _value(m, "keel_worker_jobs_running", method="sft") == 1
        assert _value(m, "keel_worker_step_seconds", method="sft") == 1.5
        assert _value(m, "keel_worker_tokens_per_second", method="sft") == 420.0
        assert 8.0 <= _value(m, "keel_worker_heartbeat_age_seconds") < 120
        assert _value(m, "keel_worker_processes") == 3  # main + 2 children
        assert _value(m, "process_resident_memory_bytes") > 0
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(10)
    # The worker logged JSON too (KEEL_LOG_FORMAT reaches Celery's own lines).
    import json

    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    assert any("ready" in json.loads(line)["message"] for line in lines)
    assert any(f":{port}/metrics" in json.loads(line)["message"] for line in lines)
