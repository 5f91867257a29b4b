"""Trained models: the outputs of succeeded jobs, usable as the base, teacher or reward of later jobs;
downloadable as a Hugging Face directory (a tar streamed from the artifact store), and deletable.

A model a fine-tuning job (`/v1/fine_tuning/jobs`) trained also answers to its OpenAI name
(`ft:...`, core/fine_tuned_models.py) on every route here, and the list shows it under both ids: the
OpenAI client's `models.list()` finds the job's `fine_tuned_model` there, and the shared base models
(api/base_models.py) on the first page: every model `chat.completions` can run (docs/inference.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from api import archive, base_models
from api.deps import CurrentProject, SessionDep
from api.errors import ApiError, not_found, problem_responses
from api.pagination import AfterQuery, LimitQuery, page_of, paginate
from api.removal import refuse_in_use, remove_files
from api.routes.checkpoints import TAR, MergedQuery
from api.schemas.jobs import ModelDeleted, ModelPublic, ModelsPublic
from core import fine_tuned_models
from core.models import Job, Model
from core.storage import get_storage

router = APIRouter(prefix="/v1/models", tags=["models"])


ModelIdPath = Annotated[str, PathParam(max_length=500, description="A Keel model id, or a fine-tuned model's OpenAI "
                                                              "name (`ft:...`).")]


def owned_model(model_id: ModelIdPath, project: CurrentProject, db: SessionDep) -> Model:
    """The path's model if it belongs to the caller's project, else 404."""
    model = (fine_tuned_models.resolve(db, project.id, model_id) if model_id.startswith(fine_tuned_models.PREFIX)
             else db.get(Model, model_id))
    if model is None or model.project_id != project.id:
        raise not_found("model", model_id, param="model_id")
    return model


OwnedModel = Annotated[Model, Depends(owned_model)]


def model_public(m: Model, openai_name: str | None = None) -> ModelPublic:
    """The model under its Keel id, or under its OpenAI name (then `alias_of` is the Keel id)."""
    return ModelPublic(id=openai_name or m.id, name=m.name, kind=m.kind, format=m.format, base_model=m.base_model,
                       job_id=m.job_id, trainer_id=m.trainer_id, created_at=int(m.created_at.timestamp()),
                       created=int(m.created_at.timestamp()), owned_by=m.project_id,
                       alias_of=m.id if openai_name else None)


def shared_model_public(m: base_models.SharedModel) -> ModelPublic:
    """A base model under a model root: its id is its directory, owned by the deployment (`keel`)."""
    return ModelPublic(id=m.path, name=m.name, kind="policy", format="hf", base_model=m.path, job_id=None,
                       created_at=m.created, created=m.created, owned_by="keel")


def _openai_names(db: Session, models: list[Model]) -> dict[str, str]:
    """Keel model id -> OpenAI name, for the models fine-tuning jobs trained."""
    job_ids = [m.job_id for m in models if m.job_id]
    jobs = db.scalars(select(Job).where(Job.id.in_(job_ids))).all() if job_ids else []
    names = {job.output_model_id: fine_tuned_models.openai_name(db, job) for job in jobs}
    return {model_id: name for model_id, name in names.items() if model_id and name}


@router.get("", summary="List models", response_model=ModelsPublic, responses=problem_responses(401, 422, 429))
def list_models(project: CurrentProject, db: SessionDep, limit: LimitQuery = 20, after: AfterQuery = None,
                kind: Annotated[Literal["policy", "reward_model", "value_model"] | None,
                                Query(description="Only models of this kind.")] = None):
    """The project's models, newest first. A model a fine-tuning job trained is followed by its entry under
    its OpenAI name (`alias_of` set); `limit` counts models, and the cursor is always a Keel model id.
    The first page (no `after`) ends with the deployment's shared base models (`owned_by: "keel"`, the
    id is the directory under a model root), unless `kind` asks for scoring models; each can be a job's
    `model` or a completion's."""
    stmt = select(Model).where(Model.project_id == project.id)
    if kind is not None:
        stmt = stmt.where(Model.kind == kind)
    rows, has_more = paginate(db, stmt, Model.id, limit=limit, after=after)
    names = _openai_names(db, rows)
    items = [entry for m in rows
             for entry in (model_public(m), *((model_public(m, names[m.id]),) if m.id in names else ()))]
    if after is None and kind in (None, "policy"):
        items += [shared_model_public(m) for m in base_models.base_models()]
    page = page_of(items, has_more)
    page.update(first_id=rows[0].id if rows else None, last_id=rows[-1].id if rows else None)
    return page


@router.get("/{model_id}", summary="Retrieve a model", response_model=ModelPublic,
            responses=problem_responses(401, 404, 429))
def retrieve_model(model: OwnedModel, model_id: ModelIdPath):
    """One model, under the id it was asked by (a Keel id or its OpenAI name)."""
    return model_public(model, model_id if model_id != model.id else None)


@router.get("/{model_id}/content", summary="Download a model", response_class=StreamingResponse,
            responses={**TAR, **problem_responses(401, 404, 422, 429)})
def download_model_content(model: OwnedModel, merged: MergedQuery = False):
    """The model as a Hugging Face directory in a tar archive, streamed: `config.json`, safetensors
    weights, tokenizer files and `generation_config.json` when there is one; load it with
    `AutoModelForCausalLM` (policy), `AutoModelForSequenceClassification` (reward model) or
    `AutoModelForTokenClassification` (value model). A `lora` model gives its adapter (load it with
    `peft.PeftModel.from_pretrained(base, dir)`); `merged=true` gives the merged full weights."""
    storage = get_storage()  # blocking calls: a sync handler runs in the threadpool
    entries = archive.hf_files(storage, model.path, lora=model.format == "lora", merged=merged)
    if not entries:
        raise ApiError(404, "model_unavailable", f"The files of model {model.id} are no longer available.",
                       param="model_id")
    stem = f"{model.id}-merged" if merged and model.format == "lora" else model.id
    return StreamingResponse(archive.stream(storage, entries, stem), media_type="application/x-tar",
                             headers=archive.content_disposition(f"{stem}.tar"))


@router.delete("/{model_id}", summary="Delete a model", response_model=ModelDeleted,
               responses=problem_responses(401, 404, 409, 429))
def delete_model(model: OwnedModel, db: SessionDep):
    """Delete a model and its files. Refused (409 `in_use`) while a queued or running job uses it as
    its model, teacher, reward model or `compare_to`."""
    db.refresh(model, with_for_update=True)
    refuse_in_use(db, model.project_id, [model.id], "model_id")
    path = model.path
    db.execute(delete(Model).where(Model.id == model.id))
    db.commit()
    remove_files(path)
    return ModelDeleted(id=model.id)
