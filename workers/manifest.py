"""A job's manifest: the node's part (`engine.runtime.manifest.collect`) joined with what only the service
knows, stored on the job row (`job.manifest`, the source of truth; `GET /v1/jobs/{id}/manifest`).

The service's part names everything by id: the datasets with the sha256 recorded at upload, the
model as the request named it, the checkpoint a fork or continuation starts from. The node's part
passes through `workers.reporter.scrub` like every event, so no deployment path reaches a tenant.
Each attempt records its own (a re-queued job may land on other hardware); a stale attempt's is
dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from core.clock import db_now
from core.models import File, Job

MANIFEST_VERSION = 1


def _file(db: Session, file_id: str | None) -> dict[str, Any] | None:
    if file_id is None:
        return None
    row = db.execute(select(File.id, File.sha256, File.bytes, File.rows).where(File.id == file_id)).one_or_none()
    if row is None:
        return {"id": file_id, "sha256": None, "bytes": None, "rows": None}
    return {"id": row.id, "sha256": row.sha256, "bytes": row.bytes, "rows": row.rows}


def compose(db: Session, job: Job, node: Mapping[str, Any], attempt: int | None) -> dict[str, Any]:
    """The manifest of `job`'s attempt from the node's part `node` (already scrubbed)."""
    spec = job.spec or {}
    node = dict(node)
    base = dict(node.pop("base_model", None) or {})
    return {
        "version": MANIFEST_VERSION,
        "job_id": job.id,
        "attempt": attempt,
        "recorded_at": int(db_now(db).timestamp()),
        **node,
        "base_model": {"ref": job.model, "sha256": base.get("sha256"), "algorithm": base.get("algorithm")},
        "datasets": {"training_file": _file(db, job.training_file_id),
                     "validation_file": _file(db, job.validation_file_id)},
        "from_checkpoint": spec.get("from_checkpoint"),
        "forked_from": spec.get("forked_from"),
    }


def record(session: Callable[[], Session], job_id: str, node: Mapping[str, Any], *, attempt: int | None,
           owns: Callable[[Any], bool], clean: Callable[[Any], Any]) -> bool:
    """Store the manifest on the job row while `owns(row)` holds for it (`DBReporter._owns`): one
    transaction, the row locked. `clean` makes the node's part JSON- and tenant-safe."""
    with session() as db:
        row = db.execute(select(Job.status, Job.attempts).where(Job.id == job_id).with_for_update()).one_or_none()
        if row is None or not owns(row):
            db.rollback()
            return False
        job = db.get(Job, job_id)
        manifest = compose(db, job, clean(dict(node)), attempt)
        db.execute(update(Job).where(Job.id == job_id).values(manifest=manifest)
                   .execution_options(synchronize_session=False))
        db.commit()
    return True
