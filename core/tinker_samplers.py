"""The Tinker room's sampling sessions (`create_sampling_session`, `asample`, docs/tinker.md).

A sampling session names what it samples (a saved model, or a base model) and the Keel trainer that
serves its requests, whose `sample` operations read saved weights through `sampler_path`. Its samples
ARE trainer operations; `tinker_sample` maps a `(sampling session, seq_id)` to the operation it
became, so a retried `asample` gets the same request id.

Saved weights are sampled by the trainer that saved them while it lives, anything else by a
sampler-only trainer of the session (`api.tinker.sampling` says why); a finished session ends its
sampler trainers (`sampler_trainer_ids`) with its training clients'.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Integer, String, UniqueConstraint, exists, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from core.ids import new_id
from core.models import Base, utcnow
from core.tinker import TinkerModel


class TinkerSampler(Base):
    """One sampling session (`sampling_session_id`)."""

    __tablename__ = "tinker_sampler"
    __table_args__ = (UniqueConstraint("session_id", "sampling_session_seq_id",
                                       name="uq_tinker_sampler_session_id_sampling_session_seq_id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("sampler"))
    session_id: Mapped[str] = mapped_column(ForeignKey("tinker_session.id", ondelete="CASCADE"))
    sampling_session_seq_id: Mapped[int] = mapped_column(Integer)
    """The client's per-session counter (shared with `save_weights_for_sampler` without a name)."""
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), index=True)
    trainer_id: Mapped[str] = mapped_column(ForeignKey("trainer.id", ondelete="CASCADE"), index=True)
    """The sampler-only trainer that runs its samples."""
    base_model: Mapped[str] = mapped_column(String(500))
    """As the client knows it (`GET samplers/{id}`, the tokenizer it loads)."""
    model_path: Mapped[str | None] = mapped_column(String(1000), default=None)
    """The `tinker://` path sampled; null: the base model itself."""
    model_id: Mapped[str | None] = mapped_column(ForeignKey("model.id", ondelete="SET NULL"), default=None)
    """The Keel model behind `model_path` (null until `save_operation_id` has written it)."""
    save_operation_id: Mapped[str | None] = mapped_column(
        ForeignKey("trainer_operation.id", ondelete="SET NULL"), default=None)
    """`save_weights_for_sampler` without a name: the save whose weights this session samples."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TinkerSample(Base):
    """One `asample` call: the trainer operation it became."""

    __tablename__ = "tinker_sample"
    __table_args__ = (UniqueConstraint("sampler_id", "seq_id", name="uq_tinker_sample_sampler_id_seq_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sampler_id: Mapped[str] = mapped_column(ForeignKey("tinker_sampler.id", ondelete="CASCADE"))
    seq_id: Mapped[int] = mapped_column(BigInteger)
    """The client's counter: a pickled copy of a sampling client counts from 10^9 x its clone id."""
    operation_id: Mapped[str] = mapped_column(ForeignKey("trainer_operation.id", ondelete="CASCADE"), unique=True)
    num_samples: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


def sampler_trainer_ids(db: Session, session_id: str) -> list[str]:
    """The session's sampler-only trainers (those of its sampling sessions that no training client owns)."""
    return list(db.scalars(select(TinkerSampler.trainer_id).distinct().where(
        TinkerSampler.session_id == session_id, ~exists().where(TinkerModel.trainer_id == TinkerSampler.trainer_id))))
