"""Files API against PostgreSQL and the local storage backend: uploads that are checked, streamed,
deduplicated and never half-visible; listing, retrieval, download, preview and deletion."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from core.models import File, Job

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


# --- upload ----------------------------------------------------------------------------------------

def test_upload_parquet_returns_the_file_object(client, auth, project_key, keel_home):
    data = parquet_bytes(PREFERENCE)
    r = upload(client, auth, data, filename="prefs.parquet", metadata='{"team": "rlhf", "v": "2"}')
    assert r.status_code == 201, r.text
    f = r.json()
    assert f["id"].startswith("file-") and f["object"] == "file" and f["purpose"] == "preference"
    assert f["filename"] == "prefs.parquet" and f["format"] == "parquet"
    assert f["bytes"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest()
    assert f["rows"] == 10 and f["columns"] == ["prompt", "chosen", "rejected", "margin"]
    assert f["status"] == "processed" and f["status_details"] is None
    assert isinstance(f["created_at"], int) and f["created_at"] > 1_700_000_000
    assert f["metadata"] == {"team": "rlhf", "v": "2"}
    assert f["stats"]["rejected"] == {"min_chars": 8, "mean_chars": 8.0, "p95_chars": 8, "max_chars": 8,
                                      "nulls": 0, "min": None, "mean": None, "max": None}
    assert f["stats"]["margin"]["min"] == 0.0 and f["stats"]["margin"]["max"] == 9.0
    assert f["stats"]["margin"]["mean"] == 4.5
    assert r.headers["X-Request-ID"]
    # Stored under its id, complete, with no partial left over.
    assert project_blobs(keel_home, project_key[0]) == [f["id"]]
    blob = keel_home / "artifacts" / "files" / project_key[0] / f["id"]
    assert blob.read_bytes() == data


@pytest.mark.parametrize(("purpose", "rows", "columns"), [
    ("preference", [{"prompt": "p", "chosen": "c", "rejected": "r", "extra": 1}], ["prompt", "chosen", "rejected"]),
    ("prompts", [{"prompt": "What is 3 + 4?", "ground_truth": "7", "data_source": "gsm8k"},
                 {"prompt": "What is 1 + 1?", "ground_truth": 2, "data_source": None}],
     ["prompt", "ground_truth", "data_source"]),
    ("sft", [{"prompt": "Say hi", "response": "hi"}, {"prompt": "Say yo", "response": "yo"}], ["prompt", "response"]),
])
def test_upload_jsonl_for_each_purpose(client, auth, purpose, rows, columns):
    r = upload(client, auth, jsonl_bytes(rows), purpose=purpose, filename="d.jsonl")
    assert r.status_code == 201, r.text
    f = r.json()
    assert f["format"] == "jsonl" and f["rows"] == len(rows) and f["columns"] == columns
    assert set(f["stats"]) == set(columns)


def test_upload_prompts_as_chat_messages(client, auth):
    rows = [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
             "ground_truth": "4"}]
    for data in (parquet_bytes(rows), jsonl_bytes(rows)):
        r = upload(client, auth, data, purpose="prompts")
        assert r.status_code == 201, r.text
        assert r.json()["stats"]["prompt"]["max_chars"] == len("Be brief.") + len("2+2?")


def test_same_bytes_same_purpose_returns_the_existing_file(client, auth, project_key, keel_home, db):
    data = parquet_bytes(PREFERENCE)
    first = upload(client, auth, data, filename="a.parquet")
    again = upload(client, auth, data, filename="b.parquet", metadata='{"x": "y"}')
    assert first.status_code == 201 and again.status_code == 200, again.text
    assert again.json() == first.json()
    assert project_blobs(keel_home, project_key[0]) == [first.json()["id"]]
    # Another purpose is another file (the same bytes can be SFT data too).
    sft = upload(client, auth, jsonl_bytes([{"prompt": "p", "response": "r", "chosen": "c", "rejected": "d"}]),
                 purpose="sft")
    pref = upload(client, auth, jsonl_bytes([{"prompt": "p", "response": "r", "chosen": "c", "rejected": "d"}]),
                  purpose="preference")
    assert sft.status_code == pref.status_code == 201 and sft.json()["id"] != pref.json()["id"]
    assert len(project_rows(db, project_key[0])) == 3


def test_concurrent_identical_upload_keeps_one_copy(client, auth, project_key, keel_home, db, monkeypatch):
    """Two identical uploads race past the duplicate check: the unique index decides, the loser answers
    with the winner (200) and leaves no blob."""
    from api.routes import files

    data = parquet_bytes(PREFERENCE)
    winner = upload(client, auth, data).json()
    real, calls = files._live_file, []

    def blind_first_check(*args):  # the pre-check misses the winner; the conflict lookup finds it
        calls.append(args)
        return None if len(calls) == 1 else real(*args)

    monkeypatch.setattr(files, "_live_file", blind_first_check)
    r = upload(client, auth, data)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == winner["id"]
    assert project_blobs(keel_home, project_key[0]) == [winner["id"]]
    assert [f.id for f in project_rows(db, project_key[0])] == [winner["id"]]


@pytest.mark.parametrize(("raw", "expected"), [
    ("../../etc/passwd.jsonl", "passwd.jsonl"),
    ("..\\..\\windows\\win.jsonl", "win.jsonl"),
    ("/abs/path/x.jsonl", "x.jsonl"),
    ("..", "upload"),
    ("dir/..", "upload"),
    ("ok name (1).jsonl", "ok name (1).jsonl"),
])
def test_filename_is_the_sanitized_basename_and_storage_uses_the_id(client, auth, project_key, keel_home,
                                                                   raw, expected):
    r = upload(client, auth, jsonl_bytes([{"prompt": raw, "response": "r"}]), purpose="sft", filename=raw)
    assert r.status_code == 201, r.text
    assert r.json()["filename"] == expected
    assert project_blobs(keel_home, project_key[0]) == [r.json()["id"]]
    assert not (keel_home / "etc").exists() and not (keel_home / "artifacts" / "etc").exists()


# --- bad input: each one refused with nothing left behind -----------------------------------------------

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


# --- list, retrieve, content, preview -----------------------------------------------------------------

def _upload_n(client, auth, n: int, purpose: str = "sft") -> list[str]:
    return [upload(client, auth, jsonl_bytes([{"prompt": f"p{purpose}{i}", "response": "r"}]), purpose=purpose,
                   filename=f"{i}.jsonl").json()["id"] for i in range(n)]


def test_list_is_paginated_newest_first_and_filtered(client, auth, other_auth):
    sft = _upload_n(client, auth, 3, "sft")
    prompts = _upload_n(client, auth, 2, "prompts")
    _upload_n(client, other_auth, 2, "sft")
    newest_first = list(reversed(sft + prompts))

    page = client.get("/v1/files", headers=auth, params={"limit": 2}).json()
    assert page["object"] == "list" and page["has_more"] is True
    assert [f["id"] for f in page["data"]] == newest_first[:2]
    assert page["first_id"] == newest_first[0] and page["last_id"] == newest_first[1]
    seen = [f["id"] for f in page["data"]]
    while page["has_more"]:
        page = client.get("/v1/files", headers=auth, params={"limit": 2, "after": page["last_id"]}).json()
        seen += [f["id"] for f in page["data"]]
    assert seen == newest_first

    only = client.get("/v1/files", headers=auth, params={"purpose": "prompts"}).json()
    assert [f["id"] for f in only["data"]] == list(reversed(prompts)) and only["has_more"] is False
    default = client.get("/v1/files", headers=auth).json()
    assert len(default["data"]) == 5 and all(f["object"] == "file" for f in default["data"])

    empty = client.get("/v1/files", headers=auth, params={"after": sft[0]}).json()
    assert empty == {"object": "list", "data": [], "has_more": False, "first_id": None, "last_id": None}


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 101}, {"purpose": "dpo"}])
def test_list_rejects_bad_query(client, auth, params):
    assert_problem(client.get("/v1/files", headers=auth, params=params), 422, "invalid_request",
                   next(iter(params)))


def test_retrieve_and_download(client, auth):
    data = parquet_bytes(PREFERENCE)
    created = upload(client, auth, data, filename="naïve prefs.parquet").json()
    got = client.get(f"/v1/files/{created['id']}", headers=auth)
    assert got.status_code == 200 and got.json() == created

    content = client.get(f"/v1/files/{created['id']}/content", headers=auth)
    assert content.status_code == 200 and content.content == data
    assert content.headers["content-type"] == "application/vnd.apache.parquet"
    assert content.headers["content-length"] == str(len(data))
    disposition = content.headers["content-disposition"]
    assert disposition.startswith("attachment;") and "filename*=UTF-8''na%C3%AFve%20prefs.parquet" in disposition
    assert content.headers["X-Request-ID"]


def test_preview_returns_the_first_rows(client, auth):
    rows = [{**r, "extra": "ignored"} for r in PREFERENCE]
    for data in (parquet_bytes(rows, row_group_size=3), jsonl_bytes(rows)):
        f = upload(client, auth, data).json()
        r = client.get(f"/v1/files/{f['id']}/preview", headers=auth, params={"limit": 4})
        assert r.status_code == 200, r.text
        assert r.json() == {"object": "list", "file_id": f["id"], "data": PREFERENCE[:4]}
        assert len(client.get(f"/v1/files/{f['id']}/preview", headers=auth).json()["data"]) == 5
        assert_problem(client.get(f"/v1/files/{f['id']}/preview", headers=auth, params={"limit": 0}),
                       422, "invalid_request", "limit")


def test_another_projects_file_is_404_like_a_missing_one(client, auth, other_auth):
    fid = upload(client, auth, parquet_bytes(PREFERENCE)).json()["id"]
    missing = "file-0000000000zzzzzzzzzzzzzzzz"
    for path in ("", "/content", "/preview"):
        theirs = assert_problem(client.get(f"/v1/files/{fid}{path}", headers=other_auth), 404, "not_found", "file_id")
        absent = assert_problem(client.get(f"/v1/files/{missing}{path}", headers=auth), 404, "not_found", "file_id")
        assert theirs["detail"].replace(fid, "X") == absent["detail"].replace(missing, "X")
    assert_problem(client.delete(f"/v1/files/{fid}", headers=other_auth), 404, "not_found")
    assert client.get(f"/v1/files/{fid}", headers=auth).status_code == 200
    assert client.get("/v1/files", headers=other_auth).json()["data"] == []


ROUTES = [("post", "/v1/files"), ("get", "/v1/files"), ("get", "/v1/files/file-x"),
          ("get", "/v1/files/file-x/content"), ("get", "/v1/files/file-x/preview"), ("delete", "/v1/files/file-x")]


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer keel_not-a-real-key"},
                                     {"Authorization": "Basic dXNlcjpwdw=="}])
def test_every_route_needs_a_valid_key(client, method, path, headers):
    kwargs = {"files": {"file": ("d.jsonl", b'{"prompt": "p", "response": "r"}\n')},
              "data": {"purpose": "sft"}} if method == "post" else {}
    r = getattr(client, method)(path, headers=headers, **kwargs)
    assert_problem(r, 401, "unauthorized")
    assert r.headers["WWW-Authenticate"] == "Bearer"


# --- delete -----------------------------------------------------------------------------------------

def test_delete_removes_the_file_and_its_bytes(client, auth, project_key, keel_home):
    data = parquet_bytes(PREFERENCE)
    fid = upload(client, auth, data).json()["id"]
    r = client.delete(f"/v1/files/{fid}", headers=auth)
    assert r.status_code == 200 and r.json() == {"id": fid, "object": "file", "deleted": True}
    assert_problem(client.get(f"/v1/files/{fid}", headers=auth), 404, "not_found")
    assert_problem(client.delete(f"/v1/files/{fid}", headers=auth), 404, "not_found")
    assert client.get("/v1/files", headers=auth).json()["data"] == []
    assert project_blobs(keel_home, project_key[0]) == []
    # The same bytes can be uploaded again: a new file.
    again = upload(client, auth, data)
    assert again.status_code == 201 and again.json()["id"] != fid


def _job(db, project_id: str, status: str, training: str, validation: str | None = None) -> Job:
    job = Job(project_id=project_id, status=status, method="sft", model="tiny", training_file_id=training,
              validation_file_id=validation)
    db.add(job)
    db.commit()
    return job


@pytest.mark.parametrize("status", ["queued", "running", "cancelling"])
@pytest.mark.parametrize("role", ["training", "validation"])
def test_delete_is_409_while_an_active_job_uses_the_file(client, auth, project_key, db, status, role):
    train = upload(client, auth, parquet_bytes(PREFERENCE)).json()["id"]
    val = upload(client, auth, parquet_bytes(PREFERENCE[:3])).json()["id"]
    job = _job(db, project_key[0], status, train, val)
    target = train if role == "training" else val
    body = assert_problem(client.delete(f"/v1/files/{target}", headers=auth), 409, "file_in_use", "file_id")
    assert job.id in body["detail"]
    assert client.get(f"/v1/files/{target}", headers=auth).status_code == 200

    job.status = "succeeded"
    db.commit()
    assert client.delete(f"/v1/files/{target}", headers=auth).status_code == 200
    db.expire_all()
    assert db.get(Job, job.id).training_file_id == train  # finished jobs keep their reference


# --- OpenAPI --------------------------------------------------------------------------------------

def test_openapi_names_and_documents_every_files_operation(client):
    spec = client.get("/openapi.json").json()
    ops = {op["operationId"]: op for path, item in spec["paths"].items() if path.startswith("/v1/files")
           for op in item.values()}
    assert set(ops) == {"upload_file", "list_files", "retrieve_file", "download_file_content", "preview_file",
                        "delete_file"}
    for name, op in ops.items():
        assert op["tags"] == ["files"] and op["summary"] and op["description"], name
        assert "401" in op["responses"], name
    body = ops["upload_file"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert body["required"] == ["file", "purpose"] and body["properties"]["file"]["format"] == "binary"
    assert {"200", "201", "413", "415", "422"} <= set(ops["upload_file"]["responses"])
    assert "409" in ops["delete_file"]["responses"]
    assert "FilePublic" in spec["components"]["schemas"] and "FilesPublic" in spec["components"]["schemas"]


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
