"""Token-level records of inference calls made under a `trajectory_id` (`/v1/chat/completions` and
`/v1/completions` with `extra_body={"trajectory_id": ...}`): what agentic RL trains on. One row per
call and choice: the prompt's token ids, the completion's token ids and their log-probs, exactly as
the serving engine sampled them (docs/inference.md). A trajectory's outcome, posted by the client
(`POST /v1/trajectories/{id}/reward`), is one `TrajectoryReward` row: what a PPO job with
`rollout.source: trajectories` trains on (docs/trajectories.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, String, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from core.models import Base, JSONType, utcnow


class TrajectoryCall(Base):
    """One choice of one inference call recorded under its trajectory."""

    __tablename__ = "trajectory_call"
    __table_args__ = (Index("ix_trajectory_call_project_id_trajectory_id", "project_id", "trajectory_id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                    autoincrement=True)
    trajectory_id: Mapped[str] = mapped_column(String(200))
    """The caller's own name for the trajectory (any string): calls under it are read back in order."""
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(500))
    """The model string the call named (as the caller wrote it)."""
    choice_index: Mapped[int] = mapped_column(Integer, default=0)
    prompt_token_ids: Mapped[list[Any]] = mapped_column(JSONType)
    completion_token_ids: Mapped[list[Any]] = mapped_column(JSONType)
    logprobs: Mapped[list[Any]] = mapped_column(JSONType)
    """The sampled tokens' log-probs under the sampling distribution, one per completion token."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


def record(db: Session, project_id: str, trajectory_id: str, model: str, prompt_token_ids: list[int],
           choices: list[dict[str, Any]]) -> None:
    """Adds one row per choice (`index`, `token_ids`, `logprobs`); the caller commits."""
    for choice in choices:
        db.add(TrajectoryCall(trajectory_id=trajectory_id, project_id=project_id, model=model,
                              choice_index=int(choice.get("index", 0)), prompt_token_ids=list(prompt_token_ids),
                              completion_token_ids=list(choice.get("token_ids") or []),
                              logprobs=list(choice.get("logprobs") or [])))


def calls(db: Session, project_id: str, trajectory_id: str) -> list[TrajectoryCall]:
    """A project's calls under `trajectory_id`, oldest first."""
    return list(db.scalars(select(TrajectoryCall).where(TrajectoryCall.project_id == project_id,
                                                        TrajectoryCall.trajectory_id == trajectory_id)
                           .order_by(TrajectoryCall.id)))


class TrajectoryReward(Base):
    """A scored trajectory: its reward, the client's group, and the training snapshot that took it."""

    __tablename__ = "trajectory_reward"

    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), primary_key=True)
    trajectory_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    reward: Mapped[float] = mapped_column(Float)
    group_id: Mapped[str | None] = mapped_column(String(200), default=None)
    """Trajectories of one group share a baseline under a group estimator (GRPO's group mean)."""
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    completed_at: Mapped[datetime] = mapped_column(default=utcnow)
    consumed_by: Mapped[str | None] = mapped_column(String(40), default=None)
    """The snapshot file (`purpose: trajectories`) a training job took it into; None: not yet trained on."""
    consumed_at: Mapped[datetime | None] = mapped_column(default=None)


class AlreadyConsumed(Exception):
    """A different reward for a trajectory a training job already took."""


def call_totals(db: Session, project_id: str, trajectory_id: str) -> tuple[int, int, int]:
    """(calls, prompt tokens, completion tokens) recorded under the trajectory; (0, 0, 0): none."""
    rows = db.execute(select(TrajectoryCall.prompt_token_ids, TrajectoryCall.completion_token_ids)
                      .where(TrajectoryCall.project_id == project_id, TrajectoryCall.trajectory_id == trajectory_id)
                      ).all()
    return len(rows), sum(len(p) for p, _ in rows), sum(len(c) for _, c in rows)


def outcome(db: Session, project_id: str, trajectory_id: str) -> TrajectoryReward | None:
    return db.get(TrajectoryReward, (project_id, trajectory_id))


def score(db: Session, project_id: str, trajectory_id: str, reward: float, group_id: str | None,
          metadata: dict[str, Any]) -> TrajectoryReward:
    """Record (or, until a job takes it, replace) the trajectory's outcome; the caller commits. A
    different reward or group after a job took it raises `AlreadyConsumed`; the same one is a no-op
    (a retried request)."""
    row = db.get(TrajectoryReward, (project_id, trajectory_id), with_for_update=True)
    if row is None:
        row = TrajectoryReward(project_id=project_id, trajectory_id=trajectory_id, reward=reward, group_id=group_id,
                               meta=metadata, completed_at=utcnow())
        db.add(row)
        return row
    if row.consumed_by is not None:
        if row.reward != reward or row.group_id != group_id:
            raise AlreadyConsumed(row.consumed_by)
        return row
    row.reward, row.group_id, row.meta, row.completed_at = reward, group_id, metadata, utcnow()
    return row


def scored_models(db: Session, project_id: str, include_consumed: bool) -> list[str]:
    """The distinct `model` strings of the project's scored trajectories' calls (a job checks each)."""
    query = (select(TrajectoryCall.model).distinct()
             .join(TrajectoryReward, (TrajectoryReward.project_id == TrajectoryCall.project_id)
                   & (TrajectoryReward.trajectory_id == TrajectoryCall.trajectory_id))
             .where(TrajectoryCall.project_id == project_id))
    if not include_consumed:
        query = query.where(TrajectoryReward.consumed_by.is_(None))
    return list(db.scalars(query))


def take(db: Session, project_id: str, models: list[str], include_consumed: bool, limit: int) -> list[dict[str, Any]]:
    """The project's scored trajectories whose every call named one of `models`, oldest first, as the
    rows of a training snapshot: `{trajectory_id, group_id, reward, calls: [{prompt_token_ids,
    completion_token_ids, logprobs}]}` (calls in order, a call's choices by index). Their outcome rows
    stay locked until the caller commits (`consume`): two jobs created at once never take the same
    trajectory."""
    other = (select(TrajectoryCall.trajectory_id).where(TrajectoryCall.project_id == project_id,
                                                         TrajectoryCall.model.not_in(models)))
    query = (select(TrajectoryReward).where(TrajectoryReward.project_id == project_id,
                                            TrajectoryReward.trajectory_id.not_in(other))
             .order_by(TrajectoryReward.completed_at, TrajectoryReward.trajectory_id).limit(limit)
             .with_for_update(skip_locked=True))
    if not include_consumed:
        query = query.where(TrajectoryReward.consumed_by.is_(None))
    outcomes = list(db.scalars(query))
    if not outcomes:
        return []
    calls_of: dict[str, list[TrajectoryCall]] = {}
    for call in db.scalars(select(TrajectoryCall).where(
            TrajectoryCall.project_id == project_id,
            TrajectoryCall.trajectory_id.in_([o.trajectory_id for o in outcomes]))
            .order_by(TrajectoryCall.id)):
        calls_of.setdefault(call.trajectory_id, []).append(call)
    return [{"trajectory_id": o.trajectory_id, "group_id": o.group_id, "reward": o.reward,
             "calls": [{"prompt_token_ids": c.prompt_token_ids, "completion_token_ids": c.completion_token_ids,
                        "logprobs": c.logprobs} for c in calls_of.get(o.trajectory_id, [])]}
            for o in outcomes if calls_of.get(o.trajectory_id)]


def consume(db: Session, project_id: str, trajectory_ids: list[str], snapshot_id: str) -> None:
    """Mark trajectories taken into snapshot `snapshot_id` (a file id); the caller commits."""
    for row in db.scalars(select(TrajectoryReward).where(TrajectoryReward.project_id == project_id,
                                                         TrajectoryReward.trajectory_id.in_(trajectory_ids))):
        row.consumed_by, row.consumed_at = snapshot_id, utcnow()
