"""A PPO job with `rollout.source: trajectories` (docs/trajectories.md): at create time the project's
scored trajectories sampled from the job's model are snapshot into a JSONL file (purpose
`trajectories`, one row per trajectory: its calls' token ids and log-probs, its reward and group)
that becomes the job's `training_file`, and they are marked consumed by that file in the same
transaction as the job's insert, so the next job does not take them again (unless its
`trajectory_filter` is `all`). The worker hands the file to the engine as it does any dataset; the
engine cuts it into samples (`engine.rollout.trajectories`). A job given a `training_file` names an
earlier snapshot (a fork, or training on the same trajectories again).
"""

from __future__ import annotations

import hashlib
import json

from sqlalchemy import select
from sqlalchemy.orm import Session

from api import model_refs
from api.errors import ApiError
from api.schemas.jobs import JobCreate, PPOMethod
from core import trajectories
from core.ids import new_id
from core.models import File
from core.storage import get_storage

PURPOSE = "trajectories"
"""The file purpose of a snapshot; never uploaded."""
COLUMNS = ["trajectory_id", "group_id", "reward", "calls"]
MAX_TRAJECTORIES = 100_000
"""Trajectories one snapshot takes at most (oldest first); the rest wait for the next job."""
PARAM = "method.hyperparameters.rollout.source"


def recorded(body: JobCreate) -> bool:
    """Whether the job trains on recorded trajectories."""
    return isinstance(body.method, PPOMethod) and body.method.hyperparameters.rollout.source == "trajectories"


def _sampled_from(db: Session, project_id: str, model: str, job_model: str) -> bool:
    """Whether a call's `model` string names the job's (resolved) model: the policy the job trains must
    be the one whose log-probs were recorded."""
    try:
        return model_refs.resolve(db, project_id, model, "model") == job_model
    except ApiError:  # a model since deleted, or a string the API no longer accepts
        return False


def snapshot(db: Session, project_id: str, body: JobCreate, *, dry_run: bool) -> None:
    """Set `body.training_file` to a new snapshot of the scored trajectories (only checked with
    `dry_run`: nothing is written); a 422 `no_trajectories` when there are none to take. The caller's
    commit (the job's insert) makes the snapshot and the consumption marks durable."""
    if body.validation_file is not None:
        raise ApiError(422, "invalid_request", "validation_file: a job on recorded trajectories has no validation "
                       "prompts (nothing is generated); leave validation_file out.", param="validation_file")
    if body.training_file is not None:
        return  # an earlier snapshot: `_training_file` checks its purpose
    rollout = body.method.hyperparameters.rollout
    include = rollout.trajectory_filter == "all"
    scored = trajectories.scored_models(db, project_id, include)
    models = [m for m in scored if _sampled_from(db, project_id, m, body.model)]
    rows = trajectories.take(db, project_id, models, include, MAX_TRAJECTORIES) if models else []
    if not rows:
        which = "scored" if include else "scored, unconsumed"
        other = f" ({len(scored)} other model name(s) have some: the job's model must be the one sampled)" if scored else ""
        raise ApiError(422, "no_trajectories", f"{PARAM}: the project has no {which} trajectories sampled from "
                       f"{body.model!r}{other}; record calls with extra_body.trajectory_id and post their rewards "
                       "(POST /v1/trajectories/{id}/reward).", param=PARAM)
    if dry_run:
        return
    data = b"".join(json.dumps(row, separators=(",", ":")).encode() + b"\n" for row in rows)
    sha = hashlib.sha256(data).hexdigest()
    file_id = db.scalar(select(File.id).where(File.project_id == project_id, File.purpose == PURPOSE,
                                              File.sha256 == sha, File.deleted_at.is_(None)))
    if file_id is None:  # `all` again with nothing new: the same snapshot
        file_id = new_id("file")
        key = f"files/{project_id}/{file_id}"
        with get_storage().writer(key) as out:
            out.write(data)
        db.add(File(id=file_id, project_id=project_id, purpose=PURPOSE, filename=f"{file_id}-trajectories.jsonl",
                    bytes=len(data), sha256=sha, format="jsonl", rows=len(rows), columns=COLUMNS, stats={},
                    status="processed", storage_key=key, meta={"trajectories": str(len(rows))}))
        db.flush()
    trajectories.consume(db, project_id, [row["trajectory_id"] for row in rows], file_id)
    body.training_file = file_id
