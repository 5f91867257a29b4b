"""The floor for Keel's API stack on this machine: a bare FastAPI app with one SQLAlchemy insert+commit
endpoint and one select-by-id endpoint, nothing else (no auth, no middleware, no validation beyond a
small body model).

`bench.api` serves it with the same uvicorn command as Keel, against the same PostgreSQL server
(a throwaway table in the benchmark's scratch database), and divides Keel's server CPU per request
by this app's: what Keel's request path costs on top of FastAPI + SQLAlchemy + psycopg themselves.

    KEEL_BENCH_BARE_DATABASE_URL=postgresql+psycopg://... uvicorn bench.bare_app:app

Handlers are plain `def`, as most FastAPI + SQLAlchemy apps write them: one thread-pool hop per
request, the session opened and closed inside it. The pool is sized like Keel's (`core.db`).
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import JSON, DateTime, Engine, String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

URL_ENV = "KEEL_BENCH_BARE_DATABASE_URL"


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "bench_bare_item"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ItemCreate(BaseModel):
    name: str
    payload: dict[str, Any] = {}


class ItemPublic(BaseModel):
    id: str
    name: str
    payload: dict[str, Any]
    created_at: int


@lru_cache(maxsize=1)
def engine() -> Engine:
    return create_engine(os.environ[URL_ENV], pool_size=20, max_overflow=20)


def create_table(url: str) -> None:
    """The throwaway table (in a scratch database the caller drops)."""
    bind = create_engine(url)
    Base.metadata.create_all(bind)
    bind.dispose()


def _public(item: Item) -> ItemPublic:
    return ItemPublic(id=item.id, name=item.name, payload=item.payload, created_at=int(item.created_at.timestamp()))


app = FastAPI(title="bare", docs_url=None, redoc_url=None)


@app.post("/items", status_code=201, response_model=ItemPublic)
def create_item(body: ItemCreate) -> ItemPublic:
    item = Item(id="item-" + uuid.uuid4().hex, name=body.name, payload=body.payload, created_at=datetime.now(UTC))
    with Session(engine(), expire_on_commit=False) as db:
        db.add(item)
        db.commit()
    return _public(item)


@app.get("/items/{item_id}", response_model=ItemPublic)
def retrieve_item(item_id: str) -> ItemPublic:
    with Session(engine()) as db:
        item = db.get(Item, item_id)
        if item is None:
            raise HTTPException(404, "no such item")
        return _public(item)
