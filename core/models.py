"""Every table, as typed SQLAlchemy 2 models. Singular lower_snake table names, `_at` timestamps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from core.ids import new_id

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JSONType = JSON().with_variant(JSONB(), "postgresql")


class UtcDateTime(TypeDecorator):
    """Every timestamp column: stored as UTC, read back aware (UTC) on PostgreSQL and SQLite alike.

    SQLite keeps no zone: SQLAlchemy writes an aware value's wall clock as it is and reads it back
    naive, so code comparing it with `utcnow()` raised and a non-UTC aware value would be stored
    shifted. Here a value is converted to UTC before it is written (SQLite: as naive UTC text, the
    form `core.clock.db_now_sql` and CURRENT_TIMESTAMP write too) and a naive value read back is UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:  # a host-local or naive-UTC value is ambiguous: refuse it loudly
            raise ValueError(f"naive datetime for a timestamp column: {value!r} (use core.models.utcnow())")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Timestamp = UtcDateTime()


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar = {dict[str, Any]: JSONType, list[Any]: JSONType, datetime: Timestamp}


class Project(Base):
    __tablename__ = "project"

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("proj"))
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiKey(Base):
    __tablename__ = "api_key"

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("key"))
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), index=True)
    prefix: Mapped[str] = mapped_column(String(16), index=True)
    """The key's first characters: finds the row without scanning every hash."""
    hash: Mapped[str] = mapped_column(String(64))
    """HMAC-SHA256 of the whole key with the deployment secret; the key itself is never stored."""
    name: Mapped[str | None] = mapped_column(String(100), default=None)
    """A label of the key's owner's choosing (`ci`, `alice`); never secret."""
    admin: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """May manage the project's keys (`/v1/keys`)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class File(Base):
    __tablename__ = "file"
    __table_args__ = (
        # One live copy of the same bytes per project and purpose; deleting a file frees its slot.
        Index("uq_file_project_purpose_sha256", "project_id", "purpose", "sha256", unique=True,
              postgresql_where=text("deleted_at IS NULL"), sqlite_where=text("deleted_at IS NULL")),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("file"))
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), index=True)
    purpose: Mapped[str] = mapped_column(String(20))
    filename: Mapped[str] = mapped_column(String(255))
    bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(10))
    rows: Mapped[int | None] = mapped_column(BigInteger, default=None)
    columns: Mapped[list[Any]] = mapped_column(default=list)
    stats: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[str] = mapped_column(String(20), default="processed")
    status_details: Mapped[str | None] = mapped_column(Text, default=None)
    storage_key: Mapped[str] = mapped_column(String(255))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(default=None)
    """Set by DELETE: the bytes go, the row stays (finished jobs still reference it) but is never served."""


class Job(Base):
    __tablename__ = "job"

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("job"))
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(20), default="queued", index=True)
    method: Mapped[str] = mapped_column(String(20))
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """The validated request body, as accepted (hyperparameters with defaults filled in)."""
    model: Mapped[str] = mapped_column(String(500))
    training_file_id: Mapped[str] = mapped_column(ForeignKey("file.id"), index=True)
    validation_file_id: Mapped[str | None] = mapped_column(ForeignKey("file.id"), default=None, index=True)
    output_model_id: Mapped[str | None] = mapped_column(String(40), default=None)
    result_files: Mapped[list[Any] | None] = mapped_column(JSONType, default=None)
    """Ids of the files a succeeded job wrote (eval: its `eval_results` file); null for other jobs."""
    seed: Mapped[int] = mapped_column(Integer, default=0)
    created_by: Mapped[str | None] = mapped_column(ForeignKey("api_key.id", ondelete="SET NULL"), default=None)
    """The API key that created the job (null for jobs older than this column)."""
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    progress: Mapped[dict[str, Any]] = mapped_column(default=dict)
    latest_metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    """How many times a worker started this job (re-queued after a lost worker: > 1)."""
    last_event_seq: Mapped[int] = mapped_column(Integer, default=0)
    """Counter for job_event.seq, bumped atomically so seq is gap-free and monotonic."""
    worker_id: Mapped[str | None] = mapped_column(String(200), default=None)
    heartbeat_at: Mapped[datetime | None] = mapped_column(default=None)
    """The worker process running the attempt is alive (the database's clock, `core.clock`)."""
    controller_heartbeat_at: Mapped[datetime | None] = mapped_column(default=None)
    """The attempt's Ray controller is alive and its loop within its step timeout (database clock);
    null until the controller's first beat. The worker stops bumping `heartbeat_at` while this is stale."""
    queue_reason: Mapped[str | None] = mapped_column(String(40), default=None)
    """Why a queued job is not running yet (`waiting_for_resources`); null otherwise."""
    placement: Mapped[list[Any] | None] = mapped_column(JSONType, default=None)
    """Where the running attempt's workers landed: `{role, rank, node_id, node_ip, ...}` each."""
    manifest: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    """What the latest attempt ran with (versions, config, seeds, data and model hashes, hardware;
    `workers.manifest`); null until an attempt started."""
    dispatched_at: Mapped[datetime | None] = mapped_column(default=None, index=True)
    """Null until the broker accepted the task (the outbox: a sweeper sends what is left)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)

    __table_args__ = (Index("ix_job_queue_order", "project_id", "status", "created_at", "id"),)
    """A queued job's position is a range count on this index."""


class JobEvent(Base):
    __tablename__ = "job_event"
    __table_args__ = (UniqueConstraint("job_id", "seq", name="uq_job_event_job_id_seq"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                    autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(40))
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Checkpoint(Base):
    __tablename__ = "checkpoint"
    __table_args__ = (UniqueConstraint("job_id", "step", name="uq_checkpoint_job_id_step"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("ckpt"))
    job_id: Mapped[str] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    path: Mapped[str] = mapped_column(String(1000))
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Model(Base):
    __tablename__ = "model"

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("model"))
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[str | None] = mapped_column(ForeignKey("job.id", ondelete="SET NULL"), default=None)
    trainer_id: Mapped[str | None] = mapped_column(ForeignKey("trainer.id", ondelete="SET NULL"), default=None)
    """The trainer whose `save_state` / `save_weights_for_sampler` wrote it (null for job outputs)."""
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(20))
    """policy | reward_model | value_model"""
    format: Mapped[str] = mapped_column(String(10))
    """hf (full weights) | lora (merged weights plus the adapter)"""
    base_model: Mapped[str] = mapped_column(String(500))
    path: Mapped[str] = mapped_column(String(1000))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class IdempotencyKey(Base):
    __tablename__ = "idempotency_key"
    __table_args__ = (UniqueConstraint("project_id", "key", name="uq_idempotency_key_project_id_key"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                    autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(255))
    request_hash: Mapped[str] = mapped_column(String(64))
    response_status: Mapped[int] = mapped_column(Integer)
    response_body: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class ClusterNode(Base):
    """One Ray node's capacity as a worker last saw it (the API never talks to Ray: it reads this)."""

    __tablename__ = "cluster_node"

    node_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    node_ip: Mapped[str] = mapped_column(String(100))
    cpus_total: Mapped[float] = mapped_column(Float)
    cpus_available: Mapped[float] = mapped_column(Float)
    gpus_total: Mapped[float] = mapped_column(Float)
    gpus_available: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(200))
    """Who published it: the cluster address, or `local:<host>:<pid>` for a worker's private Ray."""
    observed_at: Mapped[datetime] = mapped_column(index=True)
    """The database's clock when it was published."""


class Webhook(Base):
    """A project's webhook endpoint (`/v1/webhooks`); deliveries are sent by the workers (`workers.webhooks`)."""

    __tablename__ = "webhook"

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("wh"))
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(String(2000))
    event_types: Mapped[list[Any]] = mapped_column(default=list)
    secret: Mapped[str] = mapped_column(Text)
    """The signing secret, encrypted (`core.secretbox`); shown once, in the answer to the creation."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookDelivery(Base):
    """The outbox: one message for one webhook, sent at least once (`workers.webhooks`)."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (
        # Two workers scanning the same event insert the same row once.
        UniqueConstraint("webhook_id", "job_id", "event_seq", name="uq_webhook_delivery_webhook_id_job_id_event_seq"),
        Index("ix_webhook_delivery_due", "status", "next_attempt_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("msg"))
    """Also the `webhook-id` header: the same on every retry, so receivers can drop duplicates."""
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhook.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"))
    event_seq: Mapped[int] = mapped_column(Integer)
    event_type: Mapped[str] = mapped_column(String(40))
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[str] = mapped_column(String(20), default="pending")
    """pending | succeeded | failed (every retry spent)"""
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(default=None)
    """When a worker sends it next (null once it succeeded or failed for good); a sender's claim moves it
    a lease ahead, so a worker that dies mid-send leaves it due again."""
    claimed_by: Mapped[str | None] = mapped_column(String(200), default=None)
    last_status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)


class EventCursor(Base):
    """How far a worker-side consumer of the event log (`webhooks`, `integrations`) has read one job's
    events; `owner`/`lease_until` let one worker at a time hold a stateful consumer (integrations)."""

    __tablename__ = "event_cursor"

    consumer: Mapped[str] = mapped_column(String(40), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), primary_key=True)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    done: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    owner: Mapped[str | None] = mapped_column(String(200), default=None)
    lease_until: Mapped[datetime | None] = mapped_column(default=None)
    state: Mapped[dict[str, Any]] = mapped_column(default=dict)


class ProjectSecret(Base):
    """A named secret of a project (`WANDB_API_KEY`, ...), encrypted (`core.secretbox`), never returned."""

    __tablename__ = "project_secret"

    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Trainer(Base):
    """An interactive trainer (`/v1/trainers`, docs/trainers.md): a Ray actor holding weights and optimizer
    state between calls, released when idle and restored from its last save on the next call."""

    __tablename__ = "trainer"
    __table_args__ = (Index("ix_trainer_status_last_used_at", "status", "last_used_at"),)
    """The sweeper looks for active trainers idle past their timeout."""

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("trainer"))
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(20), default="active")
    """active | idle (released after `idle_timeout_s`, state saved) | released (actor gone without a save)
    | deleted | failed"""
    model: Mapped[str] = mapped_column(String(500))
    """The model reference as accepted (model id, checkpoint id, hub id or directory)."""
    base_model_path: Mapped[str] = mapped_column(String(1000))
    """`model` resolved when the trainer was created (a location the workers load from, or a hub id)."""
    lora: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    """`{rank, alpha, target_modules}`; null = full fine-tuning."""
    resources: Mapped[dict[str, Any]] = mapped_column(default=dict)
    seed: Mapped[int] = mapped_column(Integer, default=0)
    dtype: Mapped[str] = mapped_column(String(10), default="float32")
    idle_timeout_s: Mapped[int] = mapped_column(Integer, default=600)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    vocab_size: Mapped[int | None] = mapped_column(Integer, default=None)
    """From the base model's config.json when the API could read it: token ids are checked against it."""
    context_window: Mapped[int | None] = mapped_column(Integer, default=None)
    step: Mapped[int] = mapped_column(Integer, default=0)
    """Optimizer steps taken (what the actor reported last)."""
    tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    """Tokens processed by every operation so far (usage)."""
    state_path: Mapped[str | None] = mapped_column(String(1000), default=None)
    """The last full save (`save_state`, `load_state`, or the idle release's): where a restore starts."""
    state_step: Mapped[int | None] = mapped_column(Integer, default=None)
    """`step` at `state_path`."""
    auto_saves: Mapped[int] = mapped_column(Integer, default=0)
    last_op_seq: Mapped[int] = mapped_column(Integer, default=0)
    """Counter for trainer_operation.seq (bumped atomically with the insert)."""
    last_event_seq: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(200), default=None)
    lease_until: Mapped[datetime | None] = mapped_column(default=None)
    """A worker draining the operations holds the trainer until then (database clock), renewing it."""
    dispatched_at: Mapped[datetime | None] = mapped_column(default=None)
    """When a drain task was last sent (the sweeper re-sends for work no worker holds)."""
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    created_by: Mapped[str | None] = mapped_column(ForeignKey("api_key.id", ondelete="SET NULL"), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    last_used_at: Mapped[datetime] = mapped_column(default=utcnow)
    released_at: Mapped[datetime | None] = mapped_column(default=None)
    """When the actor was last released (idle timeout, DELETE); null while one may hold the state."""
    deleted_at: Mapped[datetime | None] = mapped_column(default=None)


class TrainerOperation(Base):
    """One call of a trainer primitive: queued by the API, run in `seq` order by a worker."""

    __tablename__ = "trainer_operation"
    __table_args__ = (UniqueConstraint("trainer_id", "seq", name="uq_trainer_operation_trainer_id_seq"),
                      Index("ix_trainer_operation_project_id_created_at", "project_id", "created_at"))

    id: Mapped[str] = mapped_column(String(40), primary_key=True, default=lambda: new_id("op"))
    trainer_id: Mapped[str] = mapped_column(ForeignKey("trainer.id", ondelete="CASCADE"))
    project_id: Mapped[str] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(20), default="queued")
    """queued | running | succeeded | failed"""
    request: Mapped[dict[str, Any]] = mapped_column(default=dict)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    """`{code, message, param}`"""
    tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class TrainerEvent(Base):
    """A trainer's event log (`trainer.status`, `trainer.operation`, `trainer.model`, `trainer.warning`)."""

    __tablename__ = "trainer_event"
    __table_args__ = (UniqueConstraint("trainer_id", "seq", name="uq_trainer_event_trainer_id_seq"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                    autoincrement=True)
    trainer_id: Mapped[str] = mapped_column(ForeignKey("trainer.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(40))
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
