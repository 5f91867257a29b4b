"""The files API tests' uploads and checks: parquet and JSON Lines bytes, an upload call, what a
project holds in storage and in the database, and the problem+json assertion."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import select

from core.models import File

PREFERENCE = [{"prompt": f"What is {i} + {i}?", "chosen": f"{i} + {i} = {2 * i}.", "rejected": "No idea.",
               "margin": float(i)} for i in range(10)]


def parquet_bytes(rows_or_table, **kw) -> bytes:
    table = rows_or_table if isinstance(rows_or_table, pa.Table) else pa.Table.from_pylist(rows_or_table)
    buf = io.BytesIO()
    pq.write_table(table, buf, **kw)
    return buf.getvalue()


def jsonl_bytes(rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def upload(client, auth, data: bytes, purpose: str | None = "preference", filename: str = "data.parquet",
           metadata: str | None = None, **kw):
    fields = {}
    if purpose is not None:
        fields["purpose"] = purpose
    if metadata is not None:
        fields["metadata"] = metadata
    return client.post("/v1/files", headers=auth, data=fields, files={"file": (filename, data)}, **kw)


def project_blobs(keel_home: Path, project_id: str) -> list[str]:
    """Every name under the project's storage folder (partial files included)."""
    folder = keel_home / "artifacts" / "files" / project_id
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def project_rows(db, project_id: str) -> list[File]:
    db.expire_all()
    return list(db.scalars(select(File).where(File.project_id == project_id)))


def assert_problem(r, status: int, code: str, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["status"] == status and body["code"] == code and body["type"] == f"/problems/{code}"
    assert body["detail"] and body["request_id"] == r.headers["X-Request-ID"]
    if param is not None:
        assert body.get("param") == param, body
    return body
