"""Files API bad input: every bad file, form field or body refused with the exact code and `param`, and
nothing left behind (no row, no blob), also across a size limit, a crash mid-stream, a failure after the
rename and a storage backend that checks only after close."""

from __future__ import annotations

import asyncio
import io
import json

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from tests.api.file_uploads import (
    PREFERENCE,
    assert_problem,
    jsonl_bytes,
    parquet_bytes,
    project_blobs,
    project_rows,
    upload,
)


def _corrupt_parquet() -> bytes:
    good = parquet_bytes(PREFERENCE)
    return good[:4] + bytes(len(good) - 12) + good[-8:]  # magic at both ends, garbage in between


def _bad_inputs():
    good = PREFERENCE[:3]
    yield "csv", b"prompt,chosen,rejected\na,b,c\n", "invalid_file", "file"
    yield "json_array", json.dumps(good).encode(), "invalid_file", "file"
    yield "binary", b"\x00\x01\x02garbage", "invalid_file", "file"
    yield "corrupt_parquet", _corrupt_parquet(), "invalid_file", "file"
    yield "truncated_parquet", parquet_bytes(good)[:-20], "invalid_file", "file"
    yield "bad_jsonl_line", jsonl_bytes(good) + b"{not json}\n", "invalid_file", "file"
    yield "missing_column_parquet", parquet_bytes([{"prompt": "p", "rejected": "r"}]), "schema_mismatch", "chosen"
    yield "missing_column_jsonl", jsonl_bytes([{"prompt": "p", "chosen": "c"}]), "schema_mismatch", "rejected"
    yield "wrong_type_parquet", parquet_bytes([{"prompt": "p", "chosen": 1, "rejected": "r"}]), \
        "schema_mismatch", "chosen"
    yield "wrong_type_jsonl", jsonl_bytes(good + [{"prompt": "p", "chosen": "c", "rejected": ["r"]}]), \
        "schema_mismatch", "rejected"
    yield "margin_type", parquet_bytes([{"prompt": "p", "chosen": "c", "rejected": "r", "margin": "big"}]), \
        "schema_mismatch", "margin"
    yield "null_cell_parquet", parquet_bytes(good + [{"prompt": "p", "chosen": None, "rejected": "r",
                                                      "margin": 0.0}]), "invalid_value", "chosen"
    yield "empty_cell_jsonl", jsonl_bytes(good + [{"prompt": "  ", "chosen": "c", "rejected": "r"}]), \
        "invalid_value", "prompt"
    yield "null_cell_jsonl", jsonl_bytes(good + [{"prompt": "p", "chosen": "c", "rejected": None}]), \
        "invalid_value", "rejected"
    yield "nan_margin", parquet_bytes(good + [{"prompt": "p", "chosen": "c", "rejected": "r",
                                               "margin": float("nan")}]), "invalid_value", "margin"
    yield "empty_file", b"", "empty_file", "file"
    yield "blank_jsonl", b"\n\n  \n", "empty_file", "file"
    empty = pa.table({c: pa.array([], pa.string()) for c in ("prompt", "chosen", "rejected")})
    yield "zero_rows_parquet", parquet_bytes(empty), "empty_file", "file"


@pytest.mark.parametrize(("data", "code", "param"), [pytest.param(d, c, p, id=i) for i, d, c, p in _bad_inputs()])
def test_bad_files_are_refused_and_leave_nothing(client, auth, project_key, keel_home, db, data, code, param):
    body = assert_problem(upload(client, auth, data), 422, code, param)
    assert project_rows(db, project_key[0]) == []
    assert project_blobs(keel_home, project_key[0]) == []
    assert client.get("/v1/files", headers=auth).json()["data"] == []
    if code == "invalid_value":  # the error names the column and the row
        assert param in body["detail"] and "Row 3" in body["detail"]
        assert body["errors"][0]["row"] == 3 and body["errors"][0]["param"] == param


def test_bad_jsonl_cells_name_the_line_too(client, auth):
    body = assert_problem(upload(client, auth, b'{"prompt": "p", "response": "r"}\n\n{"prompt": "", "response": "r"}\n',
                                 purpose="sft"), 422, "invalid_value", "prompt")
    assert body["errors"][0] == {"param": "prompt", "row": 1, "line": 3, "type": "invalid_value",
                                 "msg": body["detail"]}


def test_over_the_size_limit_is_413_and_leaves_nothing(client, auth, project_key, keel_home, db, monkeypatch):
    from core.config import settings

    monkeypatch.setattr(settings, "MAX_UPLOAD_BYTES", 1000)
    data = jsonl_bytes([{"prompt": "p" * 100, "response": "r"}] * 20)
    assert len(data) > 1000
    assert_problem(upload(client, auth, data, purpose="sft"), 413, "file_too_large", "file")
    # A chunked body (no Content-Length) is cut off while streaming.
    boundary = "b0undary"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nsft\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="x.jsonl"\r\n\r\n').encode() \
        + data + f"\r\n--{boundary}--\r\n".encode()

    def chunks():
        for i in range(0, len(body), 256):
            yield body[i:i + 256]

    r = client.post("/v1/files", headers={**auth, "Content-Type": f"multipart/form-data; boundary={boundary}"},
                    content=chunks())
    assert_problem(r, 413, "file_too_large", "file")
    assert project_rows(db, project_key[0]) == [] and project_blobs(keel_home, project_key[0]) == []
    # Exactly at the limit is fine.
    ok = jsonl_bytes([{"prompt": "p", "response": "r"}])
    monkeypatch.setattr(settings, "MAX_UPLOAD_BYTES", len(ok))
    assert upload(client, auth, ok, purpose="sft").status_code == 201


def test_the_stream_stops_as_soon_as_the_limit_is_passed(monkeypatch):
    """receive_upload stops pulling body chunks once the file part passes the limit."""
    from starlette.requests import Request

    from api.errors import ApiError
    from api.routes.files import receive_upload
    from core.config import settings

    monkeypatch.setattr(settings, "MAX_UPLOAD_BYTES", 256 * 1024)
    boundary = b"xyz"
    head = (b'--xyz\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nsft\r\n'
            b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n\r\n')
    chunk = b'{"prompt": "p", "response": "r"}\n' * 2000  # ~66 KB
    pulled = 0

    async def receive():
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": head if pulled == 1 else chunk, "more_body": pulled < 200}

    scope = {"type": "http", "method": "POST", "path": "/v1/files", "query_string": b"",
             "headers": [(b"content-type", b"multipart/form-data; boundary=" + boundary)]}
    with pytest.raises(ApiError) as e:
        asyncio.run(receive_upload(Request(scope, receive), io.BytesIO()))
    assert e.value.status == 413 and e.value.code == "file_too_large"
    assert pulled <= 6, f"read {pulled} chunks after passing a 256 KiB limit with 66 KB chunks"


@pytest.mark.parametrize(("fields", "param", "code"), [
    ({"purpose": "dpo"}, "purpose", "invalid_request"),
    ({}, "purpose", "invalid_request"),
    ({"purpose": "sft", "metadata": "[1, 2]"}, "metadata", "invalid_request"),
    ({"purpose": "sft", "metadata": "not json"}, "metadata", "invalid_request"),
    ({"purpose": "sft", "metadata": json.dumps({f"k{i}": "v" for i in range(17)})}, "metadata", "invalid_request"),
    ({"purpose": "sft", "metadata": '{"k": 1}'}, "metadata", "invalid_request"),
    ({"purpose": "sft", "metadata": json.dumps({"k" * 65: "v"})}, "metadata", "invalid_request"),
    ({"purpose": "sft", "extra": "1"}, "extra", "unknown_parameter"),
])
def test_bad_form_fields_are_422(client, auth, project_key, keel_home, fields, param, code):
    r = client.post("/v1/files", headers=auth, data=fields,
                    files={"file": ("d.jsonl", jsonl_bytes([{"prompt": "p", "response": "r"}]))})
    assert_problem(r, 422, code, param)
    assert project_blobs(keel_home, project_key[0]) == []


def test_sixteen_metadata_pairs_are_fine(client, auth):
    meta = {f"k{i}": "v" * 512 for i in range(16)}
    r = upload(client, auth, jsonl_bytes([{"prompt": "p", "response": "r"}]), purpose="sft",
               metadata=json.dumps(meta))
    assert r.status_code == 201 and r.json()["metadata"] == meta


def test_missing_file_part_and_malformed_bodies(client, auth, project_key, keel_home):
    only_purpose = client.post("/v1/files", headers=auth, files={"purpose": (None, "sft")})
    assert_problem(only_purpose, 422, "invalid_request", "file")
    assert_problem(client.post("/v1/files", headers=auth, json={"purpose": "sft"}), 415, "unsupported_media_type")
    garbled = client.post("/v1/files", headers={**auth, "Content-Type": "multipart/form-data; boundary=xyz"},
                          content=b"this is not multipart at all")
    assert_problem(garbled, 422, "invalid_request", "file")
    truncated = client.post("/v1/files", headers={**auth, "Content-Type": "multipart/form-data; boundary=xyz"},
                            content=b'--xyz\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nsft\r\n--xyz\r\n'
                                    b'Content-Disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n{"pro')
    assert_problem(truncated, 422, "invalid_request", "file")
    assert project_blobs(keel_home, project_key[0]) == []


def test_a_crash_mid_stream_leaves_no_row_and_no_blob(app, auth, project_key, keel_home, db, monkeypatch):
    """An exception while the body streams (a dying server's view) removes the partial file; a partial
    left by a hard kill is never listed."""
    from api.routes import files

    monkeypatch.setattr(files, "_WRITE_BYTES", 4096)
    real_write = files._FormReader.write
    seen_partial = []

    def write(self, chunk):
        real_write(self, chunk)
        if self.size > 40_000:
            seen_partial.extend(n for n in project_blobs(keel_home, project_key[0]) if ".partial-" in n)
            raise RuntimeError("power cut")

    monkeypatch.setattr(files._FormReader, "write", write)
    data = jsonl_bytes([{"prompt": "p" * 100, "response": "r"}] * 1000)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = upload(c, auth, data, purpose="sft")
    assert r.status_code == 500 and r.json()["code"] == "internal_error"
    assert seen_partial, "the upload was being written to a partial file"
    assert project_rows(db, project_key[0]) == [] and project_blobs(keel_home, project_key[0]) == []

    # What a hard kill leaves: a stale partial file. It is invisible.
    folder = keel_home / "artifacts" / "files" / project_key[0]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "file-00000000000000000000000000.partial-deadbeef").write_bytes(data[:5000])
    monkeypatch.undo()
    with TestClient(app) as c:
        assert c.get("/v1/files", headers=auth).json()["data"] == []
        assert c.get("/v1/files/file-00000000000000000000000000.partial-deadbeef", headers=auth).status_code == 404
        assert c.get("/v1/files/file-00000000000000000000000000", headers=auth).status_code == 404


def test_a_failure_after_the_rename_removes_the_blob(client, auth, project_key, keel_home, db, monkeypatch):
    from api.routes import files

    def broken_insert(db, row):
        raise RuntimeError("database went away")

    monkeypatch.setattr(files, "_insert", broken_insert)
    with TestClient(client.app, raise_server_exceptions=False) as c:
        assert upload(c, auth, parquet_bytes(PREFERENCE)).status_code == 500
    assert project_rows(db, project_key[0]) == [] and project_blobs(keel_home, project_key[0]) == []


def test_remote_style_storage_checks_after_close_and_drops_bad_files(client, auth, project_key, keel_home,
                                                                     monkeypatch):
    """Backends that cannot read a partial object check the closed object, and delete it if bad."""
    from core.storage import get_storage

    monkeypatch.setattr(get_storage(), "is_local", False)
    good = upload(client, auth, parquet_bytes(PREFERENCE))
    assert good.status_code == 201 and good.json()["rows"] == 10
    assert_problem(upload(client, auth, parquet_bytes([{"prompt": "p", "chosen": 1, "rejected": "r"}])),
                   422, "schema_mismatch", "chosen")
    assert project_blobs(keel_home, project_key[0]) == [good.json()["id"]]
