"""Tinker's sampling: `create_sampling_session`, `GET samplers/{id}`, `asample` and its future.

Who samples. Saved weights are sampled by the trainer that saved them while it lives (its `sample`
operation with `sampler_path`: the engine loads the snapshot beside the model it trains, one snapshot
at a time); anything else by a sampler-only Keel trainer of the Tinker session (no LoRA, never trained,
one per base model and dtype): a base model, or weights whose trainer has ended (a finished session
deletes its trainers; its checkpoints stay). Why not always a sampler of its own:

- an RL loop saves a snapshot and makes a sampling client on it every iteration: served by its
  training client, that is no extra actor, model copy or start-up (on a small node a second actor
  may have to wait for room);
- samples then run in order with the model's training requests, which is where an RL loop wants them
  (it samples, then trains on the samples).

A sampling session whose trainer ended moves to a sampler trainer at its next `asample`. A finished
session ends its sampler trainers with its training clients' (`core.tinker_samplers`).

Each `asample` is a `sample` operation (so it shows in `/v1/trainers`, their events and `/metrics`),
answered at once with `request_id` `sample-<operation id>` and one sequence id per sample;
`tinker_sample` dedupes the client's retries on `(sampling session, seq_id)`. The future's result is
a protobuf `SampleResponse` (`api.tinker.proto`).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from fastapi import Path as PathParam
from pydantic import Field
from sqlalchemy import exists, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api import model_refs
from api.deps import SessionDep
from api.errors import ApiError
from api.routes.trainers import _send, new_trainer
from api.schemas.trainers import TrainerCreate
from api.tinker import futures, paths, proto
from api.tinker.auth import TinkerCaller, TinkerProject
from api.tinker.sessions import Lenient, open_session
from core import trainers
from core.models import Model, Trainer, TrainerOperation
from core.tinker import TinkerModel
from core.tinker_samplers import TinkerSample, TinkerSampler

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1", include_in_schema=False)

REQUEST_PREFIX = "sample-"
SAMPLER_IDLE_S = 300
"""A sampler trainer's actor is released this long after its last sample (it holds no training state)."""


# -- sampling sessions -----------------------------------------------------------------------------

class CreateSamplingSession(Lenient):
    session_id: Annotated[str, Field(max_length=64)]
    sampling_session_seq_id: Annotated[int, Field(ge=0, le=2**31 - 1)]
    base_model: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    model_path: Annotated[str, Field(min_length=1, max_length=1000)] | None = None


def _path_model(db: Session, project_id: str, path: str, param: str) -> Model:
    try:
        return paths.resolve(db, project_id, path, param)
    except paths.PathError as err:
        raise ApiError(404, "not_found", err.message, param=param) from None


def _source(db: Session, model: Model) -> tuple[Trainer, str]:
    """The trainer that saved `model` (a `tinker://` path's model always has one) and the base
    model's name as its client knows it."""
    trainer = db.get(Trainer, model.trainer_id)
    named = db.scalar(select(TinkerModel.base_model).where(TinkerModel.trainer_id == trainer.id))
    return trainer, named or trainer.model


def sampler_trainer(db: Session, session_id: str, project_id: str, ref: str, dtype: str,
                    created_by: str | None) -> Trainer:
    """The session's sampler trainer on `ref` (a Keel model reference) in `dtype`, made on first use with
    `POST /v1/trainers`' checks (flushed, not committed). Never a training client's trainer, whose
    weights are not the base's."""
    found = db.scalar(select(Trainer).join(TinkerSampler, TinkerSampler.trainer_id == Trainer.id)
                      .where(TinkerSampler.session_id == session_id, Trainer.model == ref, Trainer.dtype == dtype,
                             Trainer.status.not_in(trainers.ENDED),
                             ~exists().where(TinkerModel.trainer_id == Trainer.id)).limit(1))
    if found is not None:
        return found
    spec = TrainerCreate(model=ref, dtype=dtype, idle_timeout_s=SAMPLER_IDLE_S,
                         metadata={"tinker_session": session_id, "tinker_role": "sampler"})
    return new_trainer(db, project_id, created_by, spec, param="base_model")


def add_sampler(db: Session, *, session_id: str, seq_id: int, project_id: str, trainer: Trainer, base_model: str,
                model_path: str | None, model_id: str | None, save_operation_id: str | None = None) -> TinkerSampler:
    row = TinkerSampler(session_id=session_id, sampling_session_seq_id=seq_id, project_id=project_id,
                        trainer_id=trainer.id, base_model=base_model, model_path=model_path, model_id=model_id,
                        save_operation_id=save_operation_id)
    db.add(row)
    db.flush()
    return row


def existing_sampler(db: Session, session_id: str, seq_id: int) -> TinkerSampler | None:
    return db.scalar(select(TinkerSampler).where(TinkerSampler.session_id == session_id,
                                                 TinkerSampler.sampling_session_seq_id == seq_id))


@router.post("/create_sampling_session")
def create_sampling_session(body: CreateSamplingSession, caller: TinkerCaller, db: SessionDep) -> dict[str, Any]:
    """A sampling session on a saved model (`model_path`, a `tinker://` path of this project) or on a
    base model; the same `sampling_session_seq_id` again answers the same session."""
    project_id = caller.project.id
    open_session(db, project_id, body.session_id)
    if (row := existing_sampler(db, body.session_id, body.sampling_session_seq_id)) is not None:
        return {"type": "create_sampling_session", "sampling_session_id": row.id}
    if body.model_path is not None:
        model = _path_model(db, project_id, body.model_path, "model_path")
        trainer, base_name = _source(db, model)
        model_id: str | None = model.id
        if trainer.status in trainers.ENDED:
            trainer = sampler_trainer(db, body.session_id, project_id, trainer.model, trainer.dtype, caller.key_id)
    elif body.base_model is not None:
        ref = model_refs.resolve(db, project_id, body.base_model, "base_model")
        trainer = sampler_trainer(db, body.session_id, project_id, ref, "float32", caller.key_id)
        base_name, model_id = body.base_model, None
    else:
        raise ApiError(422, "invalid_request", "Give model_path (a tinker:// path) or base_model.",
                       param="model_path")
    row = add_sampler(db, session_id=body.session_id, seq_id=body.sampling_session_seq_id, project_id=project_id,
                      trainer=trainer, base_model=base_name, model_path=body.model_path, model_id=model_id)
    try:
        db.commit()
    except IntegrityError:  # the same request, committed meanwhile
        db.rollback()
        row = existing_sampler(db, body.session_id, body.sampling_session_seq_id)
        if row is None:
            raise
    log.info("tinker sampling session %s on %s (trainer %s)", row.id, body.model_path or body.base_model,
             row.trainer_id)
    return {"type": "create_sampling_session", "sampling_session_id": row.id}


def owned_sampler(db: Session, project_id: str, sampler_id: str) -> TinkerSampler:
    row = db.get(TinkerSampler, sampler_id)
    if row is None or row.project_id != project_id:
        raise ApiError(404, "not_found", f"No sampling session with id {sampler_id!r}.", param="sampling_session_id")
    return row


@router.get("/samplers/{sampler_id}")
def get_sampler(sampler_id: Annotated[str, PathParam(max_length=64)], project: TinkerProject,
                db: SessionDep) -> dict[str, Any]:
    row = owned_sampler(db, project.id, sampler_id)
    return {"sampler_id": row.id, "base_model": row.base_model, "model_path": row.model_path}


# -- asample ---------------------------------------------------------------------------------------

class Chunk(Lenient):
    type: str = "encoded_text"
    tokens: list[Annotated[int, Field(ge=0, le=2**31 - 1)]] | None = None


class Prompt(Lenient):
    chunks: Annotated[list[Chunk], Field(min_length=1, max_length=1000)]


class SamplingParams(Lenient):
    max_tokens: Annotated[int, Field(ge=1, le=8192)] | None = None
    seed: Annotated[int, Field(ge=-(2**63), le=2**64 - 1)] | None = None
    stop: str | list[str] | list[int] | None = None
    temperature: Annotated[float, Field(ge=0.0)] = 1.0
    top_k: Annotated[int, Field(ge=-1)] = -1
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0


class Asample(Lenient):
    sampling_session_id: Annotated[str, Field(max_length=64)] | None = None
    seq_id: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    num_samples: Annotated[int, Field(ge=1, le=128)] = 1
    prompt: Prompt
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    prompt_logprobs: bool | None = None
    topk_prompt_logprobs: int = 0
    topk_sample_logprobs: int = 0
    prompt_alt_tokens_k: int = 0
    target_prompt_logprobs: dict[str, Any] | None = None
    prompt_logprobs_last_n: int | None = None
    type: Literal["sample"] = "sample"


_UNSUPPORTED = ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k", "target_prompt_logprobs",
                "prompt_logprobs_last_n")


def _prompt_tokens(body: Asample, trainer: Trainer) -> list[int]:
    tokens: list[int] = []
    for j, chunk in enumerate(body.prompt.chunks):
        param = f"prompt.chunks.{j}"
        if chunk.type != "encoded_text" or chunk.tokens is None:
            raise ApiError(400, "unsupported", f"{param}: {chunk.type} chunks are not supported; send token ids "
                           "(encoded_text).", param=param)
        tokens += chunk.tokens
    if not tokens:
        raise ApiError(400, "invalid_data", "prompt: the prompt has no tokens.", param="prompt.chunks")
    vocab, window = trainer.vocab_size, trainer.context_window
    if vocab is not None and (bad := next((t for t in tokens if t >= vocab), None)) is not None:
        raise ApiError(400, "invalid_data", f"prompt.chunks: token id {bad} is outside the model's vocabulary "
                       f"[0, {vocab}).", param="prompt.chunks")
    new = body.sampling_params.max_tokens or 16
    if window is not None and len(tokens) + new > window:
        param = "prompt.chunks" if len(tokens) >= window else "sampling_params.max_tokens"
        raise ApiError(400, "invalid_data", f"{param}: {len(tokens)} prompt tokens plus max_tokens {new} do not fit "
                       f"the model's context window of {window}.", param=param)
    return tokens


def _stop(stop: str | list[str] | list[int] | None) -> list[str | int]:
    """Tinker's `stop` as Keel's: None keeps the EOS stop, as Keel always does; `[]` too (Keel does not
    sample past EOS)."""
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if any(isinstance(s, str) and not s for s in stop):
        raise ApiError(400, "invalid_config", "sampling_params.stop: stop strings must not be empty.",
                       param="sampling_params.stop")
    return list(stop)


def _sampled_model(db: Session, row: TinkerSampler) -> str | None:
    """The Keel model the session samples (None: its trainer's base); a save still running is a 409."""
    if row.model_id is not None or row.save_operation_id is None:
        return row.model_id
    save = db.get(TrainerOperation, row.save_operation_id)
    result = save.result if save is not None and save.status == "succeeded" else None
    model_id = result.get("model_id") if isinstance(result, dict) else None
    if model_id is None:
        failed = save is None or save.status == "failed"
        raise ApiError(409 if not failed else 422, "sampler_not_ready" if not failed else "sampler_failed",
                       "The weights this sampling session samples are " +
                       ("not saved yet." if not failed else "missing: their save failed."), param="sampling_session_id")
    db.execute(update(TinkerSampler).where(TinkerSampler.id == row.id).values(model_id=model_id)
               .execution_options(synchronize_session=False))
    return model_id


def _serving(db: Session, row: TinkerSampler) -> Trainer:
    """The trainer that runs the session's samples: the one it had, or, once that ended (its training
    client's session finished), the session's sampler trainer on the same base."""
    trainer = db.get(Trainer, row.trainer_id)
    if trainer.status not in trainers.ENDED:
        return trainer
    moved = sampler_trainer(db, row.session_id, row.project_id, trainer.model, trainer.dtype, trainer.created_by)
    db.execute(update(TinkerSampler).where(TinkerSampler.id == row.id).values(trainer_id=moved.id)
               .execution_options(synchronize_session=False))
    return moved


def _queue_sample(db: Session, trainer: Trainer, request: dict[str, Any]) -> TrainerOperation:
    seq = db.scalar(update(Trainer).where(Trainer.id == trainer.id, Trainer.status.not_in(trainers.ENDED))
                    .values(last_op_seq=Trainer.last_op_seq + 1).returning(Trainer.last_op_seq)
                    .execution_options(synchronize_session=False))
    if seq is None:
        raise ApiError(410, "sampler_ended", "This sampling session's sampler was ended (its session finished); "
                       "create a new sampling client.", param="sampling_session_id")
    op = TrainerOperation(trainer_id=trainer.id, project_id=trainer.project_id, seq=seq, kind="sample",
                          status="queued", request=request, created_at=datetime.now(UTC))
    db.add(op)
    db.flush()
    return op


def _answer(op_id: str, num_samples: int) -> dict[str, Any]:
    request_id = REQUEST_PREFIX + op_id
    return {"request_id": request_id, "sample_sequence_ids": [f"{request_id}/{k}" for k in range(num_samples)]}


@router.post("/asample")
def asample(body: Asample, project: TinkerProject, db: SessionDep) -> dict[str, Any]:
    """Queue a sample on the session's sampler; answered at once with the request id and the
    sequence ids (one per sample, in the result's order)."""
    if body.sampling_session_id is None or body.seq_id is None:
        raise ApiError(400, "invalid_request", "sampling_session_id and seq_id are required (create a sampling "
                       "session first).", param="sampling_session_id")
    for name in _UNSUPPORTED:
        value = getattr(body, name)
        if value not in (None, 0):
            raise ApiError(400, "unsupported", f"{name}: Keel does not compute this; leave it unset.", param=name)
    row = owned_sampler(db, project.id, body.sampling_session_id)
    done = db.scalar(select(TinkerSample).where(TinkerSample.sampler_id == row.id, TinkerSample.seq_id == body.seq_id))
    if done is not None:
        return _answer(done.operation_id, done.num_samples)
    open_session(db, project.id, row.session_id)
    trainer = _serving(db, row)
    tokens = _prompt_tokens(body, trainer)
    params = body.sampling_params
    request: dict[str, Any] = {
        "prompts": [tokens], "num_samples": body.num_samples,
        "sampling_params": {"max_tokens": params.max_tokens or 16, "temperature": params.temperature,
                            "top_k": max(params.top_k, 0), "top_p": params.top_p, "stop": _stop(params.stop),
                            "seed": params.seed},
        "sampler_path": _sampled_model(db, row)}
    if body.prompt_logprobs:
        request["prompt_logprobs"] = True
    op = _queue_sample(db, trainer, request)
    db.add(TinkerSample(sampler_id=row.id, seq_id=body.seq_id, operation_id=op.id, num_samples=body.num_samples))
    try:
        db.commit()
    except IntegrityError:  # a retry of this seq_id won the race
        db.rollback()
        done = db.scalar(select(TinkerSample).where(TinkerSample.sampler_id == row.id,
                                                    TinkerSample.seq_id == body.seq_id))
        if done is None:
            raise
        return _answer(done.operation_id, done.num_samples)
    _send(trainer.id)
    return _answer(op.id, body.num_samples)


def encode_sample(result: dict[str, Any]) -> bytes:
    """A `sample` operation's result as Tinker's SampleResponse (one prompt per request)."""
    prompt = result.get("prompt_logprobs")
    return proto.encode_sample_response(
        [{"tokens": s["tokens"], "logprobs": s["logprobs"], "stop_reason": s["stop_reason"]}
         for s in result.get("sequences", [])],
        prompt[0] if isinstance(prompt, list) and prompt else None)


@futures.resolver(REQUEST_PREFIX.rstrip("-"))
def _sample_future(db: Session, project_id: str, request_id: str) -> futures.Outcome | None:
    op = db.get(TrainerOperation, request_id.removeprefix(REQUEST_PREFIX))
    if op is None or op.project_id != project_id or op.kind != "sample":
        return None
    if op.status != "succeeded":  # waiting (its queue_state) or failed: as any trainer operation answers
        outcome = futures.resolve(project_id, op.id)
        if not isinstance(outcome, dict):  # a dict: it succeeded since `op` was read; answered as protobuf
            return outcome
        db.refresh(op)
    return encode_sample(op.result or {})
