"""Which models and checkpoints queued or running jobs still need.

A job names a model, teacher, reward model or `compare_to` by model id (`model-...`) or checkpoint
id (`ckpt-...`), and may continue `from_checkpoint`; deleting any of those, or pruning it by
retention, while the job is queued or running would fail the job (or its resume). The references
live in `Job.model` and the stored `Job.spec`, so this reads the project's active jobs (few) and
looks inside their specs in Python, the same on PostgreSQL and SQLite.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import Job

ACTIVE_STATUSES = ("queued", "running", "cancelling", "pausing", "paused")
"""A job in one of these may still load what it references (a paused one when it resumes)."""


@dataclass(frozen=True)
class User:
    """A job that references an id, and as what."""

    job_id: str
    status: str
    param: str


def referenced_ids(model: str | None, spec: dict[str, Any] | None) -> dict[str, str]:
    """id -> the request field naming it, for every model or checkpoint id a job refers to."""
    spec = spec or {}
    method = spec.get("method") or {}
    reward = method.get("reward") or {}
    found = {"model": model or spec.get("model"), "method.teacher": method.get("teacher"),
             "method.reward.model": reward.get("model") if isinstance(reward, dict) else None,
             "method.compare_to": method.get("compare_to"), "from_checkpoint": spec.get("from_checkpoint")}
    return {ref: param for param, ref in found.items()
            if isinstance(ref, str) and ref.startswith(("model-", "ckpt-"))}


def users(db: Session, project_id: str, ids: Collection[str]) -> dict[str, User]:
    """For each of `ids` used by a queued or running job of the project: one such job."""
    wanted = set(ids)
    out: dict[str, User] = {}
    if not wanted:
        return out
    rows = db.execute(select(Job.id, Job.status, Job.model, Job.spec)
                      .where(Job.project_id == project_id, Job.status.in_(ACTIVE_STATUSES)))
    for job_id, status, model, spec in rows:
        for ref, param in referenced_ids(model, spec).items():
            if ref in wanted and ref not in out:
                out[ref] = User(job_id, status, param)
    return out
