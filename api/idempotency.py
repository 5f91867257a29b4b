"""`Idempotency-Key` for POST routes: a retried request returns the first response instead of acting twice.

The record is written in the same transaction as whatever the request creates, so a response is
remembered exactly when its effects are committed. Two concurrent requests with one key race on
the (project_id, key) unique constraint: the loser rolls back everything it did and answers with
the winner's response. Usage in a handler that takes `idem: IdempotencyDep`::

    if (replay := idem.replay(db, project.id)) is not None:
        return replay
    ...add rows, flush, build `body`...
    if (replay := idem.commit(db, project.id, 201, body)) is not None:
        return replay          # a concurrent twin won; nothing of ours was committed
    ...post-commit side effects...
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import Depends, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.errors import ApiError
from core.config import settings
from core.models import IdempotencyKey

REPLAYED_HEADER = "Idempotent-Replayed"


def _fingerprint(method: str, path: str, body: bytes) -> str:
    """sha256 of the method, the path and the body (JSON canonicalised: key order and spacing do not count)."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode() if body else b""
    except ValueError:
        canonical = body
    return hashlib.sha256(method.encode() + b" " + path.encode() + b"\n" + canonical).hexdigest()


@dataclass(frozen=True)
class Idempotency:
    key: str | None
    fingerprint: str
    """Of the request (`_fingerprint`); empty without a key, when nothing reads it."""

    def _cutoff(self) -> datetime:
        return datetime.now(UTC) - timedelta(seconds=settings.IDEMPOTENCY_TTL_S)

    def replay(self, db: Session, project_id: str) -> JSONResponse | None:
        """The remembered response for this key, or None; the key with another request is a 422."""
        if self.key is None:
            return None
        row = db.scalar(select(IdempotencyKey).where(IdempotencyKey.project_id == project_id,
                                                     IdempotencyKey.key == self.key,
                                                     IdempotencyKey.created_at >= self._cutoff()))
        if row is None:
            return None
        if row.request_hash != self.fingerprint:
            raise ApiError(422, "idempotency_mismatch", "This Idempotency-Key was used with a different request; "
                           "use a new key for a new request.", param="Idempotency-Key")
        return JSONResponse(row.response_body, status_code=row.response_status, headers={REPLAYED_HEADER: "true"})

    def commit(self, db: Session, project_id: str, status: int, body: BaseModel | dict[str, Any]) -> JSONResponse | None:
        """Commit the session's work together with the remembered response (`body`, a model is stored
        as its JSON dump: made only when there is a key to remember it under).

        Returns None when ours won; otherwise (a concurrent request with the same key committed
        first) our work is rolled back and the winner's response is returned."""
        if self.key is None:
            db.commit()
            return None
        if isinstance(body, BaseModel):
            body = body.model_dump(mode="json")
        db.execute(delete(IdempotencyKey).where(IdempotencyKey.project_id == project_id,
                                                IdempotencyKey.key == self.key,
                                                IdempotencyKey.created_at < self._cutoff()))
        db.add(IdempotencyKey(project_id=project_id, key=self.key, request_hash=self.fingerprint,
                              response_status=status, response_body=body))
        try:
            db.commit()
        except IntegrityError:
            db.rollback()
            replay = self.replay(db, project_id)
            if replay is None:
                raise
            return replay
        return None


async def idempotency(request: Request, idempotency_key: Annotated[str | None, Header(
        alias="Idempotency-Key", min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$",
        description="Any unique string (e.g. a UUID): a retry with the same key and body returns the first "
                    f"response instead of acting twice. Kept {settings.IDEMPOTENCY_TTL_S // 3600} hours.")] = None,
                      ) -> Idempotency:
    if idempotency_key is None:  # nothing to remember or compare: no fingerprint to take
        return _NO_KEY
    return Idempotency(idempotency_key, _fingerprint(request.method, request.url.path, await request.body()))


_NO_KEY = Idempotency(None, "")


IdempotencyDep = Annotated[Idempotency, Depends(idempotency)]


def purge_expired(db: Session) -> int:
    """Delete records past the TTL (for a periodic sweeper); returns how many."""
    cutoff = datetime.now(UTC) - timedelta(seconds=settings.IDEMPOTENCY_TTL_S)
    result = db.execute(delete(IdempotencyKey).where(IdempotencyKey.created_at < cutoff))
    db.commit()
    return result.rowcount or 0
