"""Cursor pagination shared by every list route: newest first, `after` = the last id seen.

Ids are time-ordered (core.ids), so `id < after` is "older than the cursor" without an offset scan."""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from fastapi import Query
from pydantic import BaseModel
from sqlalchemy import Select
from sqlalchemy.orm import Session

T = TypeVar("T")

LimitQuery = Annotated[int, Query(ge=1, le=100, description="Page size (1-100).")]
AfterQuery = Annotated[str | None, Query(max_length=64, description="Return items after (older than) this id.")]


class Page(BaseModel, Generic[T]):
    object: Literal["list"] = "list"
    data: list[T]
    has_more: bool
    first_id: str | None
    last_id: str | None


def paginate(db: Session, stmt: Select, id_column: Any, *, limit: int, after: str | None) -> tuple[list, bool]:
    """Run `stmt` newest-first after the cursor; returns (rows, has_more)."""
    if after:
        stmt = stmt.where(id_column < after)
    rows = list(db.scalars(stmt.order_by(id_column.desc()).limit(limit + 1)))
    return rows[:limit], len(rows) > limit


def page_of(items: list, has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": items, "has_more": has_more,
            "first_id": items[0].id if items else None, "last_id": items[-1].id if items else None}
