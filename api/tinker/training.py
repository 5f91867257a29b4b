"""A session's training clients: `create_model`, `get_info`, `forward_backward` (forward too) and
`optim_step`, and the sequence every training request of a model goes through (`submit`).

`create_model` makes a Keel trainer (`api.routes.trainers.new_trainer`: the same model checks and
admission as `POST /v1/trainers`) and names it `{session_id}:train:{model_seq_id}`, the id the client
computes itself; a retried create gets the same model.

Each training POST carries the client's `seq_id` (1, 2, ... per model, without gaps: the client sends
id N + 1 only once the POST of N returned, forward-backward chunks included since `client/config`
turns their parallel sending off). `submit` turns it into one trainer operation, so the worker runs
them in that order, and answers `{request_id: <operation id>}` at once:

- a `seq_id` seen before returns the first answer's `request_id` (the client retries POSTs for minutes);
- a bad request still takes its `seq_id`, as an operation that failed at once: its future answers the
  user-category error naming the field, and the next `seq_id` runs as usual;
- an id out of turn (not the last one plus 1: a gap, or one that came too late) fails the same way,
  naming `seq_id`, without taking the id: the sequence still waits for the next one in turn.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api import model_refs
from api.deps import SessionDep
from api.errors import ApiError, _loc_to_param
from api.routes.trainers import _check_forward, _send, new_trainer
from api.schemas.text import NUL
from api.schemas.trainers import ForwardBackwardRequest, LoraSpec, TrainerCreate
from api.tinker import proto
from api.tinker.auth import TinkerCaller
from api.tinker.futures import encoder
from api.tinker.sessions import Lenient, open_session
from core import trainers
from core.db import session_factory
from core.models import Trainer, TrainerOperation
from core.tinker import TinkerModel, TinkerRequest, model_id_of

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1", include_in_schema=False)

LORA_ALPHA = 32
"""Tinker's LoRA scale numerator (the client sets only the rank)."""
_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")
_NAMED_LAYERS = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo", "olmo2")
"""Model types whose linear layers carry these names: `train_attn` / `train_mlp` / `train_unembed` pick
among them; another architecture gets every linear layer (`all-linear`)."""


# -- models ------------------------------------------------------------------------------------------

class LoraConfig(Lenient):
    rank: Annotated[int, Field(ge=1, le=1024)] = 32
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True


class CreateModel(Lenient):
    session_id: Annotated[str, Field(max_length=64)]
    model_seq_id: Annotated[int, Field(ge=0, le=2**31 - 1)]
    base_model: Annotated[str, Field(min_length=1, max_length=500)]
    lora_config: LoraConfig | None = None
    user_metadata: dict[str, Any] | None = None
    optimizer_config: dict[str, Any] | None = None


class ModelRef(Lenient):
    model_id: Annotated[str, Field(min_length=1, max_length=80)]


def owned_model(db: Session, project_id: str, model_id: str) -> TinkerModel:
    """The caller's training client (404 for another project's, as for an unknown one)."""
    row = db.get(TinkerModel, model_id)
    if row is None or row.project_id != project_id:
        raise ApiError(404, "not_found", f"No model with id {model_id!r}.", param="model_id")
    return row


def target_modules(config: dict[str, Any], lora: LoraConfig) -> str | tuple[str, ...]:
    if config.get("model_type") not in _NAMED_LAYERS:
        return "all-linear"
    names = (_ATTN if lora.train_attn else ()) + (_MLP if lora.train_mlp else ()) + (
        ("lm_head",) if lora.train_unembed else ())
    if not names:
        raise ApiError(422, "invalid_request", "lora_config: train at least one of attn, mlp or unembed.",
                       param="lora_config")
    return names


@router.post("/create_model")
def create_model(body: CreateModel, caller: TinkerCaller, db: SessionDep) -> dict[str, Any]:
    """A training client: a trainer on `base_model` (LoRA when `lora_config` is given). The future
    resolves to its model id at once."""
    session = open_session(db, caller.project.id, body.session_id)
    model_id = model_id_of(session.id, body.model_seq_id)
    if (existing := db.get(TinkerModel, model_id)) is not None:
        return {"request_id": existing.trainer_id, "model_id": model_id}
    if body.optimizer_config and body.optimizer_config.get("type", "adamw") != "adamw":
        raise ApiError(422, "invalid_request", f"optimizer_config.type: {body.optimizer_config.get('type')!r} is not "
                       "supported (adamw).", param="optimizer_config.type")
    ref = model_refs.resolve(db, caller.project.id, body.base_model, "base_model")
    config = model_refs.model_config(db, ref) or {}
    lora = body.lora_config
    spec = TrainerCreate(model=ref, seed=(lora.seed or 0) if lora else 0, metadata={"tinker_model_id": model_id},
                         lora=LoraSpec(rank=lora.rank, alpha=LORA_ALPHA, target_modules=target_modules(config, lora))
                         if lora else None)
    trainer = new_trainer(db, caller.project.id, caller.key_id, spec, param="base_model", config=config)
    db.add(TinkerModel(id=model_id, session_id=session.id, model_seq_id=body.model_seq_id, trainer_id=trainer.id,
                       project_id=caller.project.id, base_model=body.base_model,
                       user_metadata=body.user_metadata or {}))
    try:
        db.commit()
    except IntegrityError:  # the same create, retried while the first was in flight
        db.rollback()
        existing = owned_model(db, caller.project.id, model_id)
        return {"request_id": existing.trainer_id, "model_id": model_id}
    log.info("tinker model %s is trainer %s on %s", model_id, trainer.id, ref)
    return {"request_id": trainer.id, "model_id": model_id}


def tokenizer_id(trainer: Trainer) -> str:
    """What the client hands `AutoTokenizer.from_pretrained`: the model's directory when it is local (the
    client runs beside Keel or shares its model roots), else its hub id."""
    location = trainer.base_model_path or trainer.model
    return location if Path(location).is_dir() else trainer.model


@router.post("/get_info")
def get_info(body: ModelRef, caller: TinkerCaller, db: SessionDep) -> dict[str, Any]:
    model = owned_model(db, caller.project.id, body.model_id)
    trainer = db.get(Trainer, model.trainer_id)
    config = model_refs.model_config(db, trainer.model) or {}
    arch = (config.get("architectures") or [None])[0]
    lora = trainer.lora or {}
    return {"type": "get_info", "model_id": model.id, "model_name": model.base_model,
            "model_data": {"arch": arch if isinstance(arch, str) else config.get("model_type"),
                           "model_name": model.base_model, "tokenizer_id": tokenizer_id(trainer)},
            "is_lora": bool(trainer.lora), "lora_rank": lora.get("rank")}


# -- the sequence ------------------------------------------------------------------------------------

def user_error(message: str, param: str | None, code: str = "invalid_request") -> dict[str, Any]:
    return {"code": code, "message": message, "param": param}


def validation_error(err: ValidationError) -> dict[str, Any]:
    first = err.errors()[0] if err.errors() else {}
    param = _loc_to_param(first.get("loc", ()))
    message = str(first.get("msg") or "invalid request")
    return user_error(f"{param}: {message}" if param else message, param,
                      "unknown_parameter" if first.get("type") == "extra_forbidden" else "invalid_request")


def submit(db: Session, model: TinkerModel, seq_id: int, kind: str, op_kind: str, request: dict[str, Any],
           error: dict[str, Any] | None = None) -> dict[str, Any]:
    """Record the training request `seq_id` of `model` as a trainer operation `op_kind` (queued, or failed
    at once with `error`, `{code, message, param}`) and commit; the POST's answer. `kind` is the Tinker
    route (its result's form: `api.tinker.futures.encoder`). A request a route queues without a `seq_id`
    of the client's (create-via-load) takes seq_id 0."""
    if (done := _seen(db, model.id, seq_id)) is not None:
        return {"request_id": done, "model_id": model.id}
    last = db.scalar(select(func.max(TinkerRequest.seq_id)).where(TinkerRequest.model_id == model.id))
    expected = 1 if last is None else last + 1
    in_turn = seq_id == expected or (seq_id == 0 and last is None)
    if not in_turn:  # failed without taking the seq_id: the sequence still waits for `expected`
        error = user_error(f"seq_id: got {seq_id}, expected {expected} (each training request of a model takes "
                           "the next seq_id, without gaps)", "seq_id", "invalid_seq_id")
    trainer = db.get(Trainer, model.trainer_id)
    seq = db.scalar(update(Trainer).where(Trainer.id == trainer.id, Trainer.status.not_in(trainers.ENDED))
                    .values(last_op_seq=Trainer.last_op_seq + 1).returning(Trainer.last_op_seq)
                    .execution_options(synchronize_session=False))
    if seq is None:
        db.rollback()
        raise ApiError(422, "model_ended", f"model_id: {model.id} takes no more requests (its session finished or "
                       "its trainer was deleted); create a new training client.", param="model_id")
    now = datetime.now(UTC)
    op = TrainerOperation(trainer_id=trainer.id, project_id=model.project_id, seq=seq, kind=op_kind, request=request,
                          status="failed" if error else "queued", error=error, created_at=now,
                          finished_at=now if error else None)
    db.add(op)
    db.flush()
    if in_turn:
        db.add(TinkerRequest(model_id=model.id, seq_id=seq_id, kind=kind, operation_id=op.id, created_at=now))
    if error:
        trainers.append_event(db, trainer.id, "trainer.operation", {
            "operation_id": op.id, "seq": seq, "kind": op_kind, "status": "failed", "tokens": 0, "error": error})
    try:
        db.commit()
    except IntegrityError:  # the same seq_id, retried while the first POST was in flight
        db.rollback()
        if (done := _seen(db, model.id, seq_id)) is not None:
            return {"request_id": done, "model_id": model.id}
        raise
    if not error:
        _send(trainer.id)
    return {"request_id": op.id, "model_id": model.id}


def _seen(db: Session, model_id: str, seq_id: int) -> str | None:
    return db.scalar(select(TinkerRequest.operation_id).where(TinkerRequest.model_id == model_id,
                                                              TinkerRequest.seq_id == seq_id))


# -- forward, forward_backward, optim_step ------------------------------------------------------------

def check_forward(trainer: Trainer, payload: dict[str, Any]) -> dict[str, Any] | None:
    """The checks of `/v1/trainers/{id}/forward_backward` (the loss, its inputs and config, lengths, token
    ids against the vocabulary and context window); the error, or None."""
    try:
        _check_forward(trainer, ForwardBackwardRequest.model_validate(payload))
    except ValidationError as err:
        return validation_error(err)
    except ApiError as err:
        return user_error(err.detail, err.param, err.code)
    return None


def _queue_forward(project_id: str, decoded: proto.ForwardBackward) -> dict[str, Any]:
    with session_factory()() as db:
        model = owned_model(db, project_id, decoded.model_id)
        trainer = db.get(Trainer, model.trainer_id)
        kind = "forward" if decoded.forward_only else "forward_backward"
        payload = decoded.payload()
        return submit(db, model, decoded.seq_id, kind, kind, payload, check_forward(trainer, payload))


@router.post("/forward_backward")
async def forward_backward(request: Request, caller: TinkerCaller) -> dict[str, Any]:
    """A protobuf `ForwardBackwardRequest`; `forward_only` queues a forward (no gradients)."""
    if request.headers.get("content-encoding", "identity").lower() != "identity":
        raise ApiError(415, "unsupported_encoding", "Send the forward_backward body uncompressed (client/config "
                       "sets proto_compress_fwdbwd false).")
    body = await request.body()
    try:
        decoded = proto.decode_forward_backward(body)
    except proto.ProtoError as err:
        envelope = _envelope(body)
        if envelope is None:  # not even its model and seq_id can be read
            raise ApiError(422, "invalid_request", err.message, param=err.param) from None
        # The request takes its turn as a failed one, so the client's next seq_id runs.
        return await run_in_threadpool(_refuse_forward, caller.project.id, *envelope,
                                       user_error(err.message, err.param))
    return await run_in_threadpool(_queue_forward, caller.project.id, decoded)


def _envelope(body: bytes) -> tuple[str, int, bool] | None:
    """`(model_id, seq_id, forward_only)` of a request whose data Keel cannot use, if the message parses."""
    msg = proto.ForwardBackwardRequestMessage()
    try:
        msg.ParseFromString(body)
    except Exception:  # noqa: BLE001 - any decode failure: nothing to read
        return None
    return (msg.model_id, msg.seq_id, msg.forward_only) if msg.model_id and NUL not in msg.model_id else None


def _refuse_forward(project_id: str, model_id: str, seq_id: int, forward_only: bool,
                    error: dict[str, Any]) -> dict[str, Any]:
    with session_factory()() as db:
        model = owned_model(db, project_id, model_id)
        kind = "forward" if forward_only else "forward_backward"
        return submit(db, model, seq_id, kind, kind, {}, error)


class AdamParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    learning_rate: Annotated[float, Field(ge=0.0, le=1.0)] = 1e-4
    beta1: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.9
    beta2: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.95
    eps: Annotated[float, Field(gt=0.0, le=1.0)] = 1e-12
    weight_decay: Annotated[float, Field(ge=0.0, le=10.0)] = 0.0
    grad_clip_norm: Annotated[float, Field(ge=0.0, le=1e6)] = 0.0


class OptimStep(Lenient):
    model_id: Annotated[str, Field(min_length=1, max_length=80)]
    seq_id: Annotated[int, Field(ge=0, le=2**31 - 1)]
    adam_params: dict[str, Any] | None = None
    optimizer_params: dict[str, Any] | None = None


@router.post("/optim_step")
def optim_step(body: OptimStep, caller: TinkerCaller, db: SessionDep) -> dict[str, Any]:
    """AdamW with the step's `adam_params` (Tinker's names and defaults, `grad_clip_norm` 0 = no clipping)."""
    model = owned_model(db, caller.project.id, body.model_id)
    error = None
    request: dict[str, Any] = {"adam_params": {}}
    if body.optimizer_params is not None and body.adam_params is None:
        error = user_error(f"optimizer_params: {body.optimizer_params.get('type')!r} steps are not supported; "
                           "send adam_params", "optimizer_params")
    else:
        try:
            request["adam_params"] = AdamParams.model_validate(body.adam_params or {}).model_dump()
        except ValidationError as err:
            first = err.errors()[0]
            param = ".".join(("adam_params", *(str(p) for p in first.get("loc", ()))))
            error = user_error(f"{param}: {first.get('msg')}", param)
    return submit(db, model, body.seq_id, "optim_step", "optim_step", request, error)


def _metric_name(key: str) -> str:
    """Tinker's `name:reduction`: the engine's means (`ratio_mean`, `dpo/accuracy`) get `:mean`."""
    name, colon, reduction = key.rpartition(":")
    return key if colon and name and reduction in proto.METRIC_REDUCTIONS else f"{key}:mean"


def _metrics(raw: Any) -> dict[str, float]:
    items = raw.items() if isinstance(raw, dict) else ()
    return {_metric_name(str(k)): float(v) for k, v in items if isinstance(v, int | float)}


@encoder("forward")
@encoder("forward_backward")
def _forward_output(db: Session, op: TrainerOperation, model: TinkerModel) -> bytes:
    result = op.result or {}
    outputs = [{"logprobs": [float("nan") if x is None else float(x) for x in out.get("logprobs", [])]}
               for out in result.get("loss_fn_outputs", [])]
    return proto.encode_forward_backward_output(outputs, _metrics(result.get("metrics")))


@encoder("optim_step")
def _optim_output(db: Session, op: TrainerOperation, model: TinkerModel) -> dict[str, Any]:
    return {"metrics": _metrics((op.result or {}).get("metrics"))}
