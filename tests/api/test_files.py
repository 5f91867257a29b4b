"""Files API against PostgreSQL and the local storage backend: uploads that are checked, streamed,
deduplicated and never half-visible; listing, retrieval, download, preview and deletion. Bad input:
test_files_bad_input.py."""

from __future__ import annotations

import hashlib

import pytest

from core.models import Job
from tests.api.file_uploads import (
    PREFERENCE,
    assert_problem,
    jsonl_bytes,
    parquet_bytes,
    project_blobs,
    project_rows,
    upload,
)

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
