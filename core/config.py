"""Deployment settings (env prefix `KEEL_`). Per-job hyperparameters never live here."""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

_PLACEHOLDER_SECRETS = {"", "changethis", "change-me", "dev-secret"}


class Settings(BaseSettings):
    """Every setting has an embedded default, so `keel up` runs with no configuration at all."""

    model_config = SettingsConfigDict(env_prefix="KEEL_", env_file=".env", extra="ignore")

    ENV: Literal["development", "test", "production"] = "development"
    HOME: Path = Path(".keel")
    """Root for embedded-mode state: SQLite file, broker queue, artifacts."""
    HOST: str = "127.0.0.1"
    PORT: int = 8000
    SECRET_KEY: str = "dev-secret"
    """Salt for API key hashes; must be set to a real secret in production."""
    DATABASE_URL: str = ""
    """SQLAlchemy URL; empty = SQLite file under HOME."""
    BROKER_URL: str = ""
    """Celery broker URL; empty = embedded SQLite-backed broker under HOME."""
    REDIS_URL: str = ""
    """Optional Redis for live event fan-out; empty = fan-out by polling the event table."""
    QUEUE_NAMESPACE: str = ""
    """Prefix for Celery queue names, so deployments (or test runs) sharing a broker stay apart."""
    RAY_ADDRESS: str = ""
    """Ray cluster address; empty = a local Ray on loopback started by the worker."""
    RAY_NUM_CPUS: int = 2
    STORAGE_URL: str = ""
    """Artifact store: a local directory (default HOME/artifacts) or any fsspec URL."""
    MODEL_ROOTS: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Directories workers may load base models from (JSON list or comma-separated; empty = HOME/models)."""
    MAX_UPLOAD_BYTES: int = 2 * 1024**3
    MAX_RUNNING_JOBS_PER_PROJECT: int = 2
    WORKER_HEARTBEAT_S: float = 5.0
    WORKER_HEARTBEAT_TIMEOUT_S: float = 60.0
    RATE_LIMIT_PER_MINUTE: int = 6000
    """Requests per minute per API key (0 disables)."""
    IDEMPOTENCY_TTL_S: int = 24 * 3600
    LOG_LEVEL: str = "INFO"

    @model_validator(mode="before")
    @classmethod
    def _split_roots(cls, data):
        roots = data.get("MODEL_ROOTS") if isinstance(data, dict) else None
        if isinstance(roots, str):
            text = roots.strip()
            data["MODEL_ROOTS"] = json.loads(text) if text.startswith("[") else [
                r.strip() for r in text.split(",") if r.strip()]
        return data

    @model_validator(mode="after")
    def _refuse_placeholder_secret(self):
        if self.ENV == "production" and self.SECRET_KEY in _PLACEHOLDER_SECRETS:
            raise ValueError("KEEL_SECRET_KEY must be set to a real secret when KEEL_ENV=production")
        return self

    @cached_property
    def home(self) -> Path:
        return self.HOME.expanduser().resolve()

    @property
    def database_url(self) -> str:
        return self.DATABASE_URL or f"sqlite:///{self.home / 'keel.db'}"

    @property
    def broker_url(self) -> str:
        return self.BROKER_URL or f"sqla+sqlite:///{self.home / 'broker.db'}"

    @property
    def storage_url(self) -> str:
        return self.STORAGE_URL or str(self.home / "artifacts")

    @property
    def model_roots(self) -> list[str]:
        """Allowed base-model directories (default: HOME/models); Keel's own outputs are always allowed."""
        roots = self.MODEL_ROOTS or [str(self.home / "models")]
        return [str(Path(r).expanduser().resolve()) for r in roots]


settings = Settings()
