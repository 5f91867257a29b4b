"""Run Alembic migrations and check that the models and the migrations agree."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext

import core.tinker  # its tables, and the two below, join Base.metadata
import core.tinker_samplers
import core.trajectories  # noqa: F401
from core.config import settings
from core.db import get_engine
from core.models import Base

ROOT = Path(__file__).resolve().parent.parent


def alembic_config(url: str | None = None) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.attributes["url"] = url or settings.database_url
    return cfg


def upgrade(url: str | None = None, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | None = None, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def drift(url: str | None = None) -> list:
    """Operations autogenerate would emit against a migrated DB: empty when models and migrations agree."""
    with get_engine(url or settings.database_url).connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return compare_metadata(ctx, Base.metadata)
