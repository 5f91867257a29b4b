"""Token-level records of inference calls made under a `trajectory_id` (`/v1/chat/completions` and
`/v1/completions` with `extra_body={"trajectory_id": ...}`): what agentic RL trains on. One row per
call and choice: the prompt's token ids, the completion's token ids and their log-probs, exactly as
the serving engine sampled them (docs/inference.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, select
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
