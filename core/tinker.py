"""The Tinker room's tables (`/api/v1`, docs/tinker.md): sessions, the training clients they made
(each one a Keel `trainer`), and the per-model request sequence.

A Tinker training client IS a trainer, and its training requests ARE trainer operations: these tables
only map Tinker's names onto them. `tinker_model` turns `{session_id}:train:{model_seq_id}` into a
trainer id; `tinker_request` records which operation a `(model_id, seq_id)` became, so a retried POST
gets the same `request_id` (the client retries for minutes) and the sequence can be checked for gaps.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from core.ids import new_id
from core.models import Base, utcnow


def model_id_of(session_id: str, model_seq_id: int) -> str:
    """The client computes this itself (create-via-load), so it is the only form a model id takes."""
    return f"{session_id}:train:{model_seq_id}"


class TinkerSession(Base):
    """One `ServiceClient`: made by `create_session`, kept alive by heartbeats, ended by `finish`."""

    __tablename__ = "tinker_session"

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("ses"))
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), index=True)
    api_key_id: Mapped[str | None] = mapped_column(ForeignKey("api_key.id", ondelete="SET NULL"), default=None)
    tags: Mapped[list[Any]] = mapped_column(default=list)
    user_metadata: Mapped[dict[str, Any]] = mapped_column(default=dict)
    sdk_version: Mapped[str] = mapped_column(String(40), default="")
    display_name: Mapped[str | None] = mapped_column(String(200), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    finish_reason: Mapped[str | None] = mapped_column(String(20), default=None)
    """success | errored | interrupted (first wins)"""
    finish_detail: Mapped[str | None] = mapped_column(String(1000), default=None)


class TinkerModel(Base):
    """A training client of a session: the trainer behind `{session_id}:train:{model_seq_id}`."""

    __tablename__ = "tinker_model"

    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    """`{session_id}:train:{model_seq_id}`"""
    session_id: Mapped[str] = mapped_column(ForeignKey("tinker_session.id", ondelete="CASCADE"), index=True)
    model_seq_id: Mapped[int] = mapped_column(Integer)
    trainer_id: Mapped[str] = mapped_column(ForeignKey("trainer.id", ondelete="CASCADE"), unique=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), index=True)
    base_model: Mapped[str] = mapped_column(String(500))
    """The `base_model` as the client named it (what `get_info` and the sampler report back)."""
    user_metadata: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TinkerRequest(Base):
    """A training POST of a model: its `seq_id` and the trainer operation it became."""

    __tablename__ = "tinker_request"
    __table_args__ = (UniqueConstraint("model_id", "seq_id", name="uq_tinker_request_model_id_seq_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[str] = mapped_column(ForeignKey("tinker_model.id", ondelete="CASCADE"))
    seq_id: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(40))
    """The Tinker route that made it (`forward_backward`, `optim_step`, `save_weights`, ...): how its
    result is answered (`api.tinker.futures.encoder`)."""
    operation_id: Mapped[str] = mapped_column(ForeignKey("trainer_operation.id", ondelete="CASCADE"), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
