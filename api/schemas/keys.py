"""API keys as the API shows them: never the secret, except once in the answer that created it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from api.pagination import Page
from api.schemas.hyperparameters import Strict


class ApiKeyCreate(Strict):
    """A new key of the caller's project."""

    name: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f]*$")] | None = None
    """A label to recognise the key by (`ci`, `alice`)."""
    admin: bool = False
    """May manage the project's keys (`/v1/keys`)."""


class ApiKeyPublic(BaseModel):
    """An API key, without its secret."""

    id: str
    object: Literal["api_key"] = "api_key"
    name: str | None
    prefix: str
    """The key's first characters (`keel_AbC1234`), to tell keys apart; useless for authenticating."""
    admin: bool
    project: str
    """The project's id."""
    created_at: int
    """Unix seconds."""
    revoked_at: int | None
    """Unix seconds; a revoked key is refused (401) from that moment on."""


class ApiKeyCreated(ApiKeyPublic):
    """The new key, with its secret: shown this once, only its hash is stored."""

    key: str
    tinker_api_key: str
    """The same key in the form the `tinker` client takes (`tml-` + `key`, sent as `X-API-Key` to the
    Tinker routes under `/api/v1`): the same project, revocation and limits."""


class ApiKeysPublic(Page[ApiKeyPublic]):
    pass
