"""Alembic environment: the URL and metadata come from Keel's settings and models."""

from __future__ import annotations

from alembic import context

import core.tinker  # its tables, and the two below, join Base.metadata
import core.tinker_samplers
import core.trajectories  # noqa: F401
from core.config import settings
from core.db import get_engine
from core.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return config.attributes.get("url") or settings.database_url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=_url().startswith("sqlite"), compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    with get_engine(_url()).connect() as connection:
        _run(connection)
        connection.commit()


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=connection.dialect.name == "sqlite", compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
