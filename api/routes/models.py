"""Trained models: the outputs of succeeded jobs, usable as the base, teacher or reward of later jobs."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam
from sqlalchemy import select

from api.deps import CurrentProject, SessionDep
from api.errors import not_found, problem_responses
from api.pagination import AfterQuery, LimitQuery, page_of, paginate
from api.schemas.jobs import ModelPublic, ModelsPublic
from core.models import Model

router = APIRouter(prefix="/v1/models", tags=["models"])


def owned_model(model_id: Annotated[str, PathParam(max_length=64)], project: CurrentProject,
                db: SessionDep) -> Model:
    """The path's model if it belongs to the caller's project, else 404."""
    model = db.get(Model, model_id)
    if model is None or model.project_id != project.id:
        raise not_found("model", model_id, param="model_id")
    return model


OwnedModel = Annotated[Model, Depends(owned_model)]


def model_public(m: Model) -> ModelPublic:
    return ModelPublic(id=m.id, name=m.name, kind=m.kind, format=m.format, base_model=m.base_model,
                       job_id=m.job_id, created_at=int(m.created_at.timestamp()))


@router.get("", summary="List models", response_model=ModelsPublic, responses=problem_responses(401, 422, 429))
def list_models(project: CurrentProject, db: SessionDep, limit: LimitQuery = 20, after: AfterQuery = None,
                kind: Annotated[Literal["policy", "reward_model", "value_model"] | None,
                                Query(description="Only models of this kind.")] = None):
    """The project's models, newest first."""
    stmt = select(Model).where(Model.project_id == project.id)
    if kind is not None:
        stmt = stmt.where(Model.kind == kind)
    rows, has_more = paginate(db, stmt, Model.id, limit=limit, after=after)
    return page_of([model_public(m) for m in rows], has_more)


@router.get("/{model_id}", summary="Retrieve a model", response_model=ModelPublic,
            responses=problem_responses(401, 404, 429))
def retrieve_model(model: OwnedModel):
    """One model."""
    return model_public(model)
