"""Interactive trainers: create, list, retrieve, delete, and the primitives (docs/trainers.md).

A primitive is validated here as far as the API can (the schema, then token ids and lengths against
the model's vocabulary and context window, saved-model references): a bad call is a 4xx naming the
field and leaves nothing behind. A good one becomes a `queued` trainer operation with the trainer's
next `seq`, committed (with its `Idempotency-Key` record) before the drain task is sent through
`workers.dispatch`; the answer is a 202 with the operation and its `Location`. A worker runs the
trainer's operations one at a time in `seq` order on the trainer's Ray actor (`workers.trainers`).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi import Path as PathParam
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from api import model_refs
from api.deps import CurrentCaller, CurrentProject, SessionDep
from api.errors import ApiError, not_found, problem_responses
from api.idempotency import IdempotencyDep
from api.pagination import AfterQuery, LimitQuery, page_of, paginate
from api.schemas.trainers import (
    ForwardBackwardRequest,
    LoadStateRequest,
    OptimStepRequest,
    SampleRequest,
    SaveRequest,
    TrainerCreate,
    TrainerOperationPublic,
    TrainerPublic,
    TrainersPublic,
    TrainerStatus,
)
from core import checkpoints, trainers
from core import logging as logcontext
from core.capacity import Demand, Group, admission, fresh_nodes
from core.config import settings
from core.models import Model, Trainer, TrainerOperation
from workers import dispatch

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/trainers", tags=["trainers"])



def owned_trainer(trainer_id: Annotated[str, PathParam(max_length=64)], project: CurrentProject,
                  db: SessionDep) -> Trainer:
    """The path's trainer if it belongs to the caller's project, else 404 (existence is not revealed)."""
    trainer = db.get(Trainer, trainer_id)
    if trainer is None or trainer.project_id != project.id:
        raise not_found("trainer", trainer_id, param="trainer_id")
    logcontext.annotate(trainer_id=trainer.id)
    return trainer


OwnedTrainer = Annotated[Trainer, Depends(owned_trainer)]


# -- the public shapes -----------------------------------------------------------------------------

def _unix(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


def trainer_public(t: Trainer) -> TrainerPublic:
    error = t.error if isinstance(t.error, dict) else None
    return TrainerPublic(
        id=t.id, status=t.status, model=t.model, lora=t.lora, resources=t.resources or {}, seed=t.seed,
        dtype=t.dtype, idle_timeout_s=t.idle_timeout_s, step=t.step, tokens=t.tokens, vocab_size=t.vocab_size,
        last_saved_step=t.state_step, metadata=t.meta or {},
        error={"code": str(error.get("code")), "message": str(error.get("message") or ""),
               "param": error.get("param")} if error else None,
        created_by=t.created_by, created_at=_unix(t.created_at), last_used_at=_unix(t.last_used_at),
        released_at=_unix(t.released_at))


def operation_public(op: TrainerOperation) -> TrainerOperationPublic:
    error = op.error if isinstance(op.error, dict) else None
    return TrainerOperationPublic(
        id=op.id, trainer_id=op.trainer_id, seq=op.seq, kind=op.kind, status=op.status, result=op.result,
        error={"code": str(error.get("code") or "error"), "message": str(error.get("message") or ""),
               "param": error.get("param") if isinstance(error.get("param"), str) else None} if error else None,
        tokens=op.tokens, created_at=_unix(op.created_at), started_at=_unix(op.started_at),
        finished_at=_unix(op.finished_at))


def operation_location(op: TrainerOperation) -> str:
    return f"/v1/trainers/{op.trainer_id}/operations/{op.id}"


# -- creating --------------------------------------------------------------------------------------

def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _admit(body: TrainerCreate) -> None:
    """Refuse an actor over the deployment's caps or bigger than any node (it could never start)."""
    res = body.resources
    demand = Demand((Group("trainer", 1, res.num_cpus, res.num_gpus, "PACK"),))
    verdict = admission(demand, None, max_cpus=settings.MAX_JOB_CPUS, max_gpus=settings.MAX_JOB_GPUS)
    if verdict.status == "refuse":
        param = "resources.num_gpus" if "gpus" in (verdict.param or "") else "resources.num_cpus"
        raise ApiError(422, verdict.code, f"{param}: {verdict.message}.", param=param)


def _admit_cluster(db: Session, body: TrainerCreate) -> None:
    res = body.resources
    demand = Demand((Group("trainer", 1, res.num_cpus, res.num_gpus, "PACK"),))
    verdict = admission(demand, fresh_nodes(db))
    if verdict.status == "refuse":
        param = "resources.num_gpus" if "gpus" in (verdict.param or "") else "resources.num_cpus"
        raise ApiError(422, verdict.code, f"{param}: {verdict.message.replace('the job', 'the trainer')}.",
                       param=param)


@router.post("", status_code=201, summary="Create a trainer", response_model=TrainerPublic,
             responses=problem_responses(401, 404, 422, 429))
def create_trainer(body: TrainerCreate, project: CurrentProject, caller: CurrentCaller, db: SessionDep,
                   idem: IdempotencyDep):
    """Create a trainer on a base model (LoRA or full fine-tuning). Its Ray actor starts with the first
    primitive call, is released after `idle_timeout_s` without calls (its state saved first) and restored
    on the next call."""
    if (replay := idem.replay(db, project.id)) is not None:
        return replay
    trainer = new_trainer(db, project.id, caller.key_id, body)
    public = trainer_public(trainer)
    if (replay := idem.commit(db, project.id, 201, public)) is not None:
        return replay
    log.info("trainer created on %s", trainer.model)
    return public


def new_trainer(db: Session, project_id: str, key_id: str | None, body: TrainerCreate, *, param: str = "model",
                config: dict[str, Any] | None = None) -> Trainer:
    """Check the model reference (`param` names it in errors) and the resources, and add the trainer with
    its first event to the session (not committed). Also how a Tinker `create_model` makes its trainer;
    `config` is the base model's config.json when the caller read it already."""
    ref = model_refs.resolve(db, project_id, body.model, param)
    _admit(body)
    _admit_cluster(db, body)
    config = config if config is not None else model_refs.model_config(db, ref) or {}
    trainer = Trainer(
        project_id=project_id, status="active", model=ref, base_model_path=checkpoints.model_location(db, ref),
        lora=body.lora.model_dump(mode="json") if body.lora else None,
        resources=body.resources.model_dump(mode="json"), seed=body.seed, dtype=body.dtype,
        idle_timeout_s=body.idle_timeout_s, meta=body.metadata, vocab_size=_positive_int(config.get("vocab_size")),
        context_window=model_refs.context_window(config), created_by=key_id,
        last_used_at=datetime.now(UTC))
    db.add(trainer)
    db.flush()
    trainers.append_event(db, trainer.id, "trainer.status", {"status": "active", "reason": "created"})
    logcontext.annotate(trainer_id=trainer.id)
    return trainer


@router.get("", summary="List trainers", response_model=TrainersPublic, responses=problem_responses(401, 422, 429))
def list_trainers(project: CurrentProject, db: SessionDep, limit: LimitQuery = 20, after: AfterQuery = None,
                  status: Annotated[TrainerStatus | None, Query(description="Only trainers in this status.")] = None):
    """The project's trainers, newest first."""
    stmt = select(Trainer).where(Trainer.project_id == project.id)
    if status is not None:
        stmt = stmt.where(Trainer.status == status)
    rows, has_more = paginate(db, stmt, Trainer.id, limit=limit, after=after)
    return page_of([trainer_public(t) for t in rows], has_more)


@router.get("/{trainer_id}", summary="Retrieve a trainer", response_model=TrainerPublic,
            responses=problem_responses(401, 404, 429))
def get_trainer(trainer: OwnedTrainer):
    """One trainer: its status, step, tokens processed and last save."""
    return trainer_public(trainer)


@router.delete("/{trainer_id}", summary="Delete a trainer", response_model=TrainerPublic,
               responses=problem_responses(401, 404, 429))
def delete_trainer(trainer: OwnedTrainer, db: SessionDep):
    """End a trainer: its actor is released without a save (its resources freed), queued operations fail
    with `trainer_deleted`, and later calls are a 409. Models it saved stay. Deleting again changes nothing."""
    end_trainer(db, trainer)
    db.refresh(trainer)
    return trainer_public(trainer)


def end_trainer(db: Session, trainer: Trainer, reason: str = "deleted") -> bool:
    """Mark the trainer deleted (its queued operations fail) and commit, then have a worker release its
    actor; False when it was deleted already. Also how a finished Tinker session ends its trainers."""
    now = datetime.now(UTC)
    if not db.execute(update(Trainer).where(Trainer.id == trainer.id, Trainer.status != "deleted")
                      .values(status="deleted", deleted_at=now).execution_options(synchronize_session=False)).rowcount:
        return False
    db.execute(update(TrainerOperation).where(TrainerOperation.trainer_id == trainer.id,
                                              TrainerOperation.status == "queued")
               .values(status="failed", finished_at=now,
                       error={"code": "trainer_deleted", "message": "The trainer was deleted before this "
                              "operation ran.", "param": "trainer_id"})
               .execution_options(synchronize_session=False))
    trainers.append_event(db, trainer.id, "trainer.status", {"status": "deleted", "reason": reason})
    db.commit()
    _send(trainer.id)  # a worker releases the actor
    log.info("trainer %s deleted (%s)", trainer.id, reason)
    return True


# -- the primitives --------------------------------------------------------------------------------

def _send(trainer_id: str) -> None:
    """Ask a worker to drain the trainer; a broker problem never fails the request (the sweeper resends)."""
    try:
        dispatch.enqueue_trainer(trainer_id)
    except Exception as exc:  # noqa: BLE001 - any broker failure: the operations stay queued
        log.warning("enqueue_trainer(%s) failed, left to the sweeper: %s", trainer_id, exc)


def _refuse_ended(trainer: Trainer) -> None:
    if trainer.status == "deleted":
        raise ApiError(409, "trainer_deleted", f"Trainer {trainer.id} was deleted; create a new one (its saved "
                       "models remain usable as `model`).", param="trainer_id")
    if trainer.status == "failed":
        message = (trainer.error or {}).get("message") or "it cannot load its model"
        raise ApiError(409, "trainer_failed", f"Trainer {trainer.id} failed ({message}); create a new one.",
                       param="trainer_id")


def _check_tokens(ids: list[int], vocab: int | None, param: str) -> None:
    if vocab is None:
        return
    for j, tok in enumerate(ids):
        if tok >= vocab:
            raise ApiError(422, "invalid_data", f"{param}: token id {tok} (at {j}) is outside the model's vocabulary "
                           f"[0, {vocab}).", param=param)


def _check_forward(trainer: Trainer, body: ForwardBackwardRequest) -> None:
    window = trainer.context_window
    for i, datum in enumerate(body.data):
        _check_tokens(datum.model_input, trainer.vocab_size, f"data.{i}.model_input")
        if datum.loss_fn_inputs.target_tokens is not None:
            _check_tokens(datum.loss_fn_inputs.target_tokens, trainer.vocab_size,
                          f"data.{i}.loss_fn_inputs.target_tokens")
        if window is not None and len(datum.model_input) > window:
            raise ApiError(422, "invalid_data", f"data.{i}.model_input: {len(datum.model_input)} tokens do not fit "
                           f"the model's context window of {window}.", param=f"data.{i}.model_input")


def _check_sample(db: Session, trainer: Trainer, body: SampleRequest) -> None:
    window, new = trainer.context_window, body.sampling_params.max_tokens
    for i, prompt in enumerate(body.prompts):
        if isinstance(prompt, list):
            _check_tokens(prompt, trainer.vocab_size, f"prompts.{i}")
            if window is not None and len(prompt) + new > window:
                param = f"prompts.{i}" if len(prompt) >= window else "sampling_params.max_tokens"
                raise ApiError(422, "invalid_data", f"{param}: {len(prompt)} prompt tokens plus max_tokens {new} do "
                               f"not fit the model's context window of {window}.", param=param)
    for j, stop in enumerate(body.sampling_params.stop):
        if isinstance(stop, int):
            _check_tokens([stop], trainer.vocab_size, f"sampling_params.stop.{j}")
    if body.sampler_path is not None:
        _saved_model(db, trainer, body.sampler_path, "sampler_path", same_trainer=True)


def _saved_model(db: Session, trainer: Trainer, model_id: str, param: str, *, same_trainer: bool) -> Model:
    model = db.get(Model, model_id)
    if model is None or model.project_id != trainer.project_id:
        raise not_found("model", model_id, param=param)
    if same_trainer and model.trainer_id != trainer.id:
        raise ApiError(422, "invalid_model", f"{param}: {model_id} was not saved by trainer {trainer.id} "
                       "(save_weights_for_sampler or save_state gives one).", param=param)
    return model


def _check_name(db: Session, trainer: Trainer, kind: str, name: str) -> None:
    """A save never overwrites an earlier one of the same kind (a model may point at it)."""
    requests = db.scalars(select(TrainerOperation.request).where(
        TrainerOperation.trainer_id == trainer.id, TrainerOperation.status != "failed", TrainerOperation.kind == kind))
    if any(isinstance(r, dict) and r.get("name") == name for r in requests):
        raise ApiError(409, "name_taken", f"name: trainer {trainer.id} already has a {kind} named {name!r}; "
                       "choose another name.", param="name")


def _check_load(db: Session, trainer: Trainer, body: LoadStateRequest) -> None:
    model = _saved_model(db, trainer, body.path, "path", same_trainer=False)
    if not body.optimizer:
        return
    states = db.scalars(select(TrainerOperation.result).where(
        TrainerOperation.trainer_id == model.trainer_id, TrainerOperation.kind == "save_state",
        TrainerOperation.status == "succeeded")) if model.trainer_id else []
    if not any(isinstance(r, dict) and r.get("model_id") == model.id for r in states):
        raise ApiError(422, "invalid_model", f"path: {model.id} holds no optimizer state (only `save_state` writes "
                       "one); load its weights with `optimizer: false`.", param="optimizer")


def queue_operation(db: Session, trainer: Trainer, kind: str, request: dict[str, Any], idem, response: Response):
    """Insert the operation with the trainer's next seq (refused if the trainer ended meanwhile), commit it
    with the idempotency record, then send the drain task; the 202 answer."""
    seq = db.scalar(update(Trainer).where(Trainer.id == trainer.id, Trainer.status.not_in(trainers.ENDED))
                    .values(last_op_seq=Trainer.last_op_seq + 1).returning(Trainer.last_op_seq)
                    .execution_options(synchronize_session=False))
    if seq is None:  # deleted (or failed) since the trainer was read
        db.rollback()
        db.refresh(trainer)
        _refuse_ended(trainer)
    op = TrainerOperation(trainer_id=trainer.id, project_id=trainer.project_id, seq=seq, kind=kind,
                          status="queued", request=request, created_at=datetime.now(UTC))
    db.add(op)
    db.flush()
    public = operation_public(op)
    if (replay := idem.commit(db, trainer.project_id, 202, public)) is not None:
        return replay
    _send(trainer.id)
    response.headers["Location"] = operation_location(op)
    return public


_OP_RESPONSES = {202: {"description": "Queued: poll the operation (`Location`) for its result.",
                       "headers": {"Location": {"description": "The operation's URL.",
                                                "schema": {"type": "string"}}}},
                 **problem_responses(401, 404, 409, 422, 429)}


def _prepare(db: Session, trainer: Trainer, idem) -> Any:
    if (replay := idem.replay(db, trainer.project_id)) is not None:
        return replay
    _refuse_ended(trainer)
    return None


@router.post("/{trainer_id}/forward_backward", status_code=202, summary="Forward and backward pass",
             response_model=TrainerOperationPublic, responses=_OP_RESPONSES)
def forward_backward(body: ForwardBackwardRequest, trainer: OwnedTrainer, db: SessionDep, idem: IdempotencyDep,
                     response: Response):
    """Compute `loss_fn` on the datums and accumulate its gradients (until `optim_step`). The result has
    each datum's per-token `logprobs` of `target_tokens` and the loss metrics."""
    if (replay := _prepare(db, trainer, idem)) is not None:
        return replay
    _check_forward(trainer, body)
    return queue_operation(db, trainer, "forward_backward", body.model_dump(mode="json", exclude_none=True), idem,
                           response)


@router.post("/{trainer_id}/forward", status_code=202, summary="Forward pass", response_model=TrainerOperationPublic,
             responses=_OP_RESPONSES)
def forward(body: ForwardBackwardRequest, trainer: OwnedTrainer, db: SessionDep, idem: IdempotencyDep,
            response: Response):
    """As `forward_backward`, without gradients: log-probabilities and the loss only."""
    if (replay := _prepare(db, trainer, idem)) is not None:
        return replay
    _check_forward(trainer, body)
    return queue_operation(db, trainer, "forward", body.model_dump(mode="json", exclude_none=True), idem, response)


@router.post("/{trainer_id}/optim_step", status_code=202, summary="Optimizer step",
             response_model=TrainerOperationPublic, responses=_OP_RESPONSES)
def optim_step(body: OptimStepRequest, trainer: OwnedTrainer, db: SessionDep, idem: IdempotencyDep,
               response: Response):
    """Apply the accumulated gradients with AdamW (`adam_params`) and clear them; the result is the new step."""
    if (replay := _prepare(db, trainer, idem)) is not None:
        return replay
    return queue_operation(db, trainer, "optim_step", body.model_dump(mode="json"), idem, response)


@router.post("/{trainer_id}/sample", status_code=202, summary="Sample", response_model=TrainerOperationPublic,
             responses=_OP_RESPONSES)
def sample(body: SampleRequest, trainer: OwnedTrainer, db: SessionDep, idem: IdempotencyDep, response: Response):
    """Generate `num_samples` continuations of each prompt from the current weights (or the snapshot
    `sampler_path`): tokens, text and per-token log-probabilities."""
    if (replay := _prepare(db, trainer, idem)) is not None:
        return replay
    _check_sample(db, trainer, body)
    return queue_operation(db, trainer, "sample", body.model_dump(mode="json"), idem, response)


@router.post("/{trainer_id}/save_state", status_code=202, summary="Save weights and optimizer state",
             response_model=TrainerOperationPublic, responses=_OP_RESPONSES)
def save_state(body: SaveRequest, trainer: OwnedTrainer, db: SessionDep, idem: IdempotencyDep, response: Response):
    """Save the weights and the optimizer state. The result's `path` is a Keel model id: usable as the
    `model` of a job or a trainer, downloadable at `GET /v1/models/{model_id}/content`, and loadable with
    `load_state`."""
    if (replay := _prepare(db, trainer, idem)) is not None:
        return replay
    _check_name(db, trainer, "save_state", body.name)
    return queue_operation(db, trainer, "save_state", body.model_dump(mode="json"), idem, response)


@router.post("/{trainer_id}/load_state", status_code=202, summary="Load a saved state",
             response_model=TrainerOperationPublic, responses=_OP_RESPONSES)
def load_state(body: LoadStateRequest, trainer: OwnedTrainer, db: SessionDep, idem: IdempotencyDep,
               response: Response):
    """Replace the weights (and, with `optimizer`, the optimizer state and step) with a `save_state` of this
    project; pending gradients are dropped."""
    if (replay := _prepare(db, trainer, idem)) is not None:
        return replay
    _check_load(db, trainer, body)
    return queue_operation(db, trainer, "load_state", body.model_dump(mode="json"), idem, response)


@router.post("/{trainer_id}/save_weights_for_sampler", status_code=202, summary="Save weights for sampling",
             response_model=TrainerOperationPublic, responses=_OP_RESPONSES)
def save_weights_for_sampler(body: SaveRequest, trainer: OwnedTrainer, db: SessionDep, idem: IdempotencyDep,
                             response: Response):
    """Save the current weights only (no optimizer state): `sample` from them with `sampler_path`, or use
    them as a model."""
    if (replay := _prepare(db, trainer, idem)) is not None:
        return replay
    _check_name(db, trainer, "save_weights_for_sampler", body.name)
    return queue_operation(db, trainer, "save_weights_for_sampler", body.model_dump(mode="json"), idem, response)
