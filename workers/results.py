"""Result files a job wrote (an evaluation's `eval_results.jsonl`), registered as File rows when the
job succeeds.

The engine writes them into the job's output location (`jobs/<job>/output/<name>` in the artifact
store, `workers.resolve.job_dirs`) and names them in `JobResult.files`. The worker reads each one's
size and sha256 there (before the final transaction: the store may be remote) and, in the
transaction that marks the job succeeded, adds a File row whose `storage_key` is that key: the
bytes are not copied. Files are deduplicated by content as uploads are: results byte-identical to a
live file of the project (a re-run of the same evaluation) link that file instead.
"""

from __future__ import annotations

import hashlib
import json

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from core.ids import new_id
from core.models import File, Job
from core.storage import get_storage
from engine.config import JobResult

_READ_BYTES = 1024**2


def output_key(job_id: str, name: str) -> str:
    """The storage key of file `name` in a job's output directory (see `workers.resolve.job_dirs`)."""
    return f"jobs/{job_id}/output/{name}"


def result_files(job: Job, result: JobResult) -> list[File]:
    """Unsaved File rows for the files `result` names (read from the store: blocking)."""
    storage = get_storage()
    rows = []
    for written in result.files:
        key = output_key(job.id, written.name)
        digest, size, first = hashlib.sha256(), 0, b""
        with storage.open(key) as handle:
            while chunk := handle.read(_READ_BYTES):
                if not size:
                    first = chunk.split(b"\n", 1)[0]
                digest.update(chunk)
                size += len(chunk)
        columns = list(json.loads(first)) if first.strip() else []
        rows.append(File(id=new_id("file"), project_id=job.project_id, purpose=written.purpose,
                         filename=f"{job.id}-{written.name}", bytes=size, sha256=digest.hexdigest(), format="jsonl",
                         rows=written.rows, columns=columns, stats={}, status="processed", storage_key=key,
                         meta={"job_id": job.id}))
    return rows


def register_files(db: Session, job_id: str, rows: list[File]) -> list[str]:
    """Add `rows` in the caller's transaction and link them from the job (`Job.result_files`); returns
    the file ids (an identical live file's id where there is one)."""
    ids = []
    for row in rows:
        existing = db.scalar(select(File.id).where(File.project_id == row.project_id, File.purpose == row.purpose,
                                                   File.sha256 == row.sha256, File.deleted_at.is_(None)))
        if existing is None:
            db.add(row)
        ids.append(existing or row.id)
    db.execute(update(Job).where(Job.id == job_id).values(result_files=ids)
               .execution_options(synchronize_session=False))
    return ids
