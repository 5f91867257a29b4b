"""The Tinker client's start-up and lifetime calls: `client/config`, `client/dynamic_config`,
`create_session`, `session_heartbeat`, `sessions/{id}/finish`, `telemetry`, `get_server_capabilities`
and `healthz`.

A session belongs to the project of the key that made it; another project's session is a 404, as an
unknown one. Finishing a session (first reason wins) deletes its training clients' trainers and its
sampler trainers: their actors go, their saved checkpoints stay usable (`tinker://` paths, Keel models).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body
from fastapi import Path as PathParam
from pydantic import ConfigDict, Field
from sqlalchemy import select, update

from api.deps import SessionDep
from api.errors import ApiError
from api.routes.trainers import end_trainer
from api.schemas.text import NulFree
from api.tinker.auth import TinkerCaller, TinkerProject
from core.config import settings
from core.models import Model, Trainer
from core.tinker import TinkerModel, TinkerSession
from core.tinker_samplers import sampler_trainer_ids

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1", include_in_schema=False)


class Lenient(NulFree):
    """Tinker's request bodies: unknown members (the client's `type` tags, newer fields) are ignored; NUL
    in any string is a 422 at its field, as in Keel's own schemas (PostgreSQL cannot store it)."""

    model_config = ConfigDict(extra="ignore", protected_namespaces=())


class CreateSession(Lenient):
    tags: Annotated[list[Annotated[str, Field(max_length=200)]], Field(max_length=100)] = Field(default_factory=list)
    user_metadata: dict[str, Any] | None = None
    sdk_version: Annotated[str, Field(max_length=40)] = ""
    display_name: Annotated[str, Field(max_length=200)] | None = None


class SessionRef(Lenient):
    session_id: Annotated[str, Field(max_length=64)]


class FinishReason(Lenient):
    type: Literal["success", "errored", "interrupted"] = "success"


class Finish(Lenient):
    reason: FinishReason = Field(default_factory=FinishReason)
    detail: Annotated[str, Field(max_length=10_000)] | None = None


def owned_session(db, project_id: str, session_id: str) -> TinkerSession:
    """The caller's session (404 for another project's, as for an unknown one)."""
    row = db.get(TinkerSession, session_id)
    if row is None or row.project_id != project_id:
        raise ApiError(404, "not_found", f"No session with id {session_id!r}.", param="session_id")
    return row


def open_session(db, project_id: str, session_id: str) -> TinkerSession:
    """The caller's session, refused (410, which stops the client's heartbeats) once finished."""
    row = owned_session(db, project_id, session_id)
    if row.finished_at is not None:
        raise ApiError(410, "session_finished", f"Session {session_id} is finished ({row.finish_reason}); create "
                       "a new ServiceClient.", param="session_id")
    return row


@router.post("/client/config")
def client_config(caller: TinkerCaller) -> dict[str, Any]:
    """The client's feature flags. Forward-backward chunks go one after another (each POST after the
    previous one returned), so a model's requests arrive in `seq_id` order and a missing one is a gap;
    a chunk's estimated size stays well under the deployment's JSON body limit."""
    return {"pjwt_auth_enabled": False, "parallel_fwdbwd_chunks": False, "proto_compress_fwdbwd": False,
            "fwdbwd_max_chunk_bytes_count": max(1024, settings.MAX_JSON_BODY_BYTES // 3),
            "use_pyqwest_transport": False, "sample_use_retrieve_futures": False,
            "custom_loss_server_side": False, "sample_join_sampling_session": False}


@router.post("/client/dynamic_config")
def client_dynamic_config(caller: TinkerCaller) -> dict[str, Any]:
    return {"refresh_interval_sec": 300, "sample_cancel_enabled": False}


@router.post("/create_session")
def create_session(body: CreateSession, caller: TinkerCaller, db: SessionDep) -> dict[str, Any]:
    row = TinkerSession(project_id=caller.project.id, api_key_id=caller.key_id, tags=body.tags,
                        user_metadata=body.user_metadata or {}, sdk_version=body.sdk_version,
                        display_name=body.display_name)
    db.add(row)
    db.commit()
    log.info("tinker session %s created (sdk %s)", row.id, body.sdk_version)
    return {"type": "create_session", "session_id": row.id}


@router.post("/session_heartbeat")
def session_heartbeat(body: SessionRef, project: TinkerProject, db: SessionDep) -> dict[str, Any]:
    open_session(db, project.id, body.session_id)
    db.execute(update(TinkerSession).where(TinkerSession.id == body.session_id)
               .values(heartbeat_at=datetime.now(UTC)).execution_options(synchronize_session=False))
    db.commit()
    return {"type": "session_heartbeat"}


@router.post("/sessions/{session_id}/finish")
def finish_session(session_id: Annotated[str, PathParam(max_length=64)], project: TinkerProject, db: SessionDep,
                   body: Annotated[Finish | None, Body()] = None) -> dict[str, Any]:
    """Mark the session finished (the first reason stays) and delete its training clients' trainers."""
    row = owned_session(db, project.id, session_id)
    body = body or Finish()
    if row.finished_at is None:
        n = db.execute(update(TinkerSession).where(TinkerSession.id == session_id, TinkerSession.finished_at.is_(None))
                       .values(finished_at=datetime.now(UTC), finish_reason=body.reason.type,
                               finish_detail=(body.detail or "")[:1000] or None)
                       .execution_options(synchronize_session=False)).rowcount
        db.commit()
        if n:
            trainer_ids = db.scalars(select(TinkerModel.trainer_id).where(TinkerModel.session_id == session_id))
            for trainer_id in [*trainer_ids, *sampler_trainer_ids(db, session_id)]:
                trainer = db.get(Trainer, trainer_id)
                if trainer is not None:
                    end_trainer(db, trainer, reason="session_finished")
            log.info("tinker session %s finished: %s", session_id, body.reason.type)
    return {"type": "finish_session", "session_id": session_id}


@router.post("/telemetry")
def telemetry(caller: TinkerCaller) -> dict[str, str]:
    """Accepted and dropped: Keel's own logs, events and metrics tell what happened."""
    return {"status": "accepted"}


def _local_models() -> list[str]:
    """Directories with a config.json directly under the model roots, or one level below them."""
    found: list[str] = []
    for root in settings.model_roots:
        base = Path(root)
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir())[:200]:
            candidates = [entry] + (sorted(entry.iterdir())[:50] if entry.is_dir() else [])
            found += [str(c) for c in candidates if c.is_dir() and (c / "config.json").is_file()]
    return found[:500]


@router.get("/get_server_capabilities")
def get_server_capabilities(project: TinkerProject, db: SessionDep) -> dict[str, Any]:
    """The base models a training client may name: directories under the deployment's model roots, and
    the project's own Keel models (their ids); hub ids are taken too when the workers can reach them."""
    names = _local_models()
    names += list(db.scalars(select(Model.id).where(Model.project_id == project.id).order_by(Model.id.desc())
                             .limit(200)))
    return {"supported_models": [{"model_name": n, "trainable": True, "sampleable": True} for n in names]}


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}

