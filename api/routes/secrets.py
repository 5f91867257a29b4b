"""The project's secrets: credentials that integrations use on the workers (`WANDB_API_KEY`,
`MLFLOW_TRACKING_TOKEN`, ...), so they never travel in job specs. Write-only: values are stored
encrypted (`core.secretbox`) and no route returns them. Admin keys only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam
from sqlalchemy import delete, select

from api.deps import AdminCaller, SessionDep
from api.errors import ApiError, not_found, problem_responses
from api.schemas.secrets import SecretDeleted, SecretName, SecretPublic, SecretsPublic, SecretWrite
from core import secretbox
from core.integrations import check_secret
from core.models import ProjectSecret, utcnow

router = APIRouter(prefix="/v1/projects/current/secrets", tags=["secrets"])

NamePath = Annotated[SecretName, PathParam(description="Upper-case letters, digits and `_`, e.g. `WANDB_API_KEY`.")]


def secret_public(row: ProjectSecret) -> SecretPublic:
    return SecretPublic(name=row.name, created_at=int(row.created_at.timestamp()),
                        updated_at=int(row.updated_at.timestamp()))


@router.put("/{name}", summary="Set a project secret", response_model=SecretPublic,
            responses=problem_responses(401, 403, 422, 429))
def set_project_secret(name: NamePath, body: SecretWrite, caller: AdminCaller, db: SessionDep):
    """Create or replace a secret of the caller's project. The answer never holds the value. A URL a
    worker will connect to (`WANDB_BASE_URL`) must be http(s) on a public address."""
    try:
        check_secret(name, body.value)  # blocking DNS: this sync handler runs in the thread pool
    except ValueError as exc:
        raise ApiError(422, "invalid_url", f"{name}: {exc}", param="value") from exc
    row = db.get(ProjectSecret, (caller.project.id, name))
    if row is None:
        row = ProjectSecret(project_id=caller.project.id, name=name, value=secretbox.seal(body.value))
        db.add(row)
    else:
        row.value, row.updated_at = secretbox.seal(body.value), utcnow()
    db.commit()
    return secret_public(row)


@router.get("", summary="List project secrets", response_model=SecretsPublic,
            responses=problem_responses(401, 403, 429))
def list_project_secrets(caller: AdminCaller, db: SessionDep):
    """The names of the project's secrets (never their values), by name."""
    rows = db.scalars(select(ProjectSecret).where(ProjectSecret.project_id == caller.project.id)
                      .order_by(ProjectSecret.name))
    return SecretsPublic(data=[secret_public(r) for r in rows])


@router.delete("/{name}", summary="Delete a project secret", response_model=SecretDeleted,
               responses=problem_responses(401, 403, 404, 422, 429))
def delete_project_secret(name: NamePath, caller: AdminCaller, db: SessionDep):
    """Delete a secret of the caller's project; integrations that need it stop getting it."""
    if not db.execute(delete(ProjectSecret).where(ProjectSecret.project_id == caller.project.id,
                                                  ProjectSecret.name == name)).rowcount:
        raise not_found("secret", name, param="name")
    db.commit()
    return SecretDeleted(name=name)
