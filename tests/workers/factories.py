"""Factories for the workers' tests: files in the artifact store, job rows as the API writes them,
and small polling helpers."""

from __future__ import annotations

import hashlib
import shutil
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from core.db import session_scope
from core.ids import new_id
from core.models import File, Job, JobEvent, utcnow
from core.storage import get_storage

TINY_SFT = {
    "data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
    "optim": {"lr": 1e-3},
    "trainer": {"total_training_steps": 4, "save_freq": 2},
}
"""Four steps of SFT on the demo data: a few seconds on two CPU cores."""


def add_file(project_id: str, source: str | None = None, purpose: str = "sft") -> str:
    """A processed File row whose bytes (a copy of `source`, or a stub) are in the artifact store."""
    file_id = new_id("file")
    key = f"files/{file_id}"
    data = Path(source).read_bytes() if source else b'{"prompt": "hi", "response": "hello"}\n'
    with get_storage().writer(key) as f:
        f.write(data)
    with session_scope() as db:
        db.add(File(id=file_id, project_id=project_id, purpose=purpose, filename=Path(source or "stub.jsonl").name,
                    bytes=len(data), sha256=hashlib.sha256(data + file_id.encode()).hexdigest(),
                    format="parquet" if source and source.endswith(".parquet") else "jsonl",
                    storage_key=key))
    return file_id


def add_job(project_id: str, training_file_id: str, *, model: str = "model-doesnotexist", method: str = "sft",
            hyperparameters: dict[str, Any] | None = None, resources: dict[str, Any] | None = None,
            suffix: str | None = None, from_checkpoint: str | None = None, **columns: Any) -> str:
    """A job row as the API inserts it (status queued unless `columns` say otherwise). The default model
    is a Keel model id that does not exist: a stub job that a worker happens to run fails at once."""
    spec = {"model": model, "training_file": training_file_id, "validation_file": None,
            "method": {"type": method, "hyperparameters": hyperparameters or {}}, "seed": 0, "suffix": suffix,
            "metadata": {}, "resources": resources or {"num_workers": 1}, "from_checkpoint": from_checkpoint}
    job_id = new_id("job")
    with session_scope() as db:
        db.add(Job(id=job_id, project_id=project_id, method=method, spec=spec, model=model,
                   training_file_id=training_file_id, **columns))
    return job_id


def add_running_job(project_id: str, file_id: str, *, heartbeat_age_s: float = 0.0, attempts: int = 1,
                    status: str = "running") -> str:
    now = utcnow()
    return add_job(project_id, file_id, status=status, attempts=attempts, worker_id="test:1:abc",
                   started_at=now, dispatched_at=now, heartbeat_at=now - timedelta(seconds=heartbeat_age_s))


def get_job(job_id: str) -> Job:
    with session_scope() as db:
        return db.get(Job, job_id)


def events_of(job_id: str) -> list[JobEvent]:
    with session_scope() as db:
        return list(db.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.seq)))


def wait_for(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def copy_tree(src: str, dst: Path) -> str:
    shutil.copytree(src, dst)
    return str(dst)
