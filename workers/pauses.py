"""What pauses took from a job, read from its `job.status` events.

A pause ends an attempt (the resumed run is a new attempt, so the attempt fence keeps a leftover
controller's writes out) but is no failure: attempts that ended in a pause do not count against the
sweeper's `MAX_ATTEMPTS`, and time spent paused (until the resumed attempt started) does not count
against `trainer.max_duration_s`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import JobEvent


@dataclass(frozen=True)
class PauseHistory:
    attempts: int
    """Attempts that ended in a pause (`pausing` -> `paused`; a queued job paused spent none)."""
    seconds: float
    """Time from each `paused` to the next `running`."""


def pause_history(db: Session, job_id: str) -> PauseHistory:
    rows = db.execute(select(JobEvent.data, JobEvent.created_at)
                      .where(JobEvent.job_id == job_id, JobEvent.type == "job.status").order_by(JobEvent.seq)).all()
    attempts, seconds = 0, 0.0
    previous: str | None = None
    paused_at: datetime | None = None
    for data, at in rows:
        status = data.get("status") if isinstance(data, dict) else None
        if status == "paused":
            attempts += previous == "pausing"
            paused_at = at
        elif status == "running" and paused_at is not None:
            seconds += max(0.0, (at - paused_at).total_seconds())
            paused_at = None
        previous = status
    return PauseHistory(attempts, seconds)
