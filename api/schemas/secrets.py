"""Project secrets (credentials the workers hand to integrations, e.g. `WANDB_API_KEY`): write-only."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from api.schemas.hyperparameters import Strict

SecretName = Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]{0,99}$", examples=["WANDB_API_KEY"])]


class SecretWrite(Strict):
    value: Annotated[str, Field(min_length=1, max_length=8192)]
    """Stored encrypted; never returned by any route."""


class SecretPublic(BaseModel):
    """A secret's name and when it was set; never its value."""

    name: str
    object: Literal["project.secret"] = "project.secret"
    created_at: int
    updated_at: int


class SecretsPublic(BaseModel):
    object: Literal["list"] = "list"
    data: list[SecretPublic]


class SecretDeleted(BaseModel):
    name: str
    object: Literal["project.secret.deleted"] = "project.secret.deleted"
    deleted: bool = True
