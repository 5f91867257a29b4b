"""Files: dataset uploads that are streamed, checked, deduplicated and never half-visible.

An upload is parsed from the raw request stream (python-multipart's streaming parser), written in
~1 MiB pieces to the artifact store under a temporary name while its sha256 is computed, and checked
(core.datasets). A file that fails a check is refused with a 4xx and nothing is kept: no row, no
blob. Only checked bytes get their real name, and the row is committed after that rename, so a crash
at any point leaves at worst an unreferenced blob (or a `.partial-*` file), never a row without its
bytes. Memory stays flat whatever the file size.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, BinaryIO
from urllib.parse import quote

import anyio
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from api.deps import CurrentProject, SessionDep
from api.errors import ApiError, not_found, problem_responses
from api.pagination import AfterQuery, LimitQuery, page_of, paginate
from api.schemas.files import UPLOAD_BODY, FileDeleted, FilePreview, FilePublic, FilePurpose, FilesPublic
from api.schemas.text import MESSAGE as NUL_MESSAGE
from api.schemas.text import has_nul
from core.config import settings
from core.dataset_rules import OUTPUT_PURPOSES, PURPOSES, DatasetError, DatasetInfo
from core.datasets import inspect_dataset, preview_rows
from core.ids import new_id
from core.models import File, Job, utcnow
from core.storage import Storage, get_storage

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/files", tags=["files"])

ACTIVE_JOB_STATUSES = ("queued", "running", "cancelling", "pausing", "paused")
_WRITE_BYTES = 1024**2
"""File data is handed to the store in pieces of about this size (one thread hop each)."""
_FORM_OVERHEAD = 64 * 1024
"""Multipart framing and the small fields, beyond the file itself, a body may carry."""
_MAX_FIELD_BYTES = 16 * 1024
_MAX_PARTS = 8
_MAX_METADATA_PAIRS, _MAX_METADATA_KEY, _MAX_METADATA_VALUE = 16, 64, 512
_MEDIA_TYPES = {"parquet": "application/vnd.apache.parquet", "jsonl": "application/jsonl", "csv": "text/csv"}


# --- dependencies --------------------------------------------------------------------------------

def owned_file(file_id: Annotated[str, Path(max_length=64)], db: SessionDep, project: CurrentProject) -> File:
    """The caller's live file, or 404 (another project's file looks exactly like a missing one)."""
    row = db.get(File, file_id)
    if row is None or row.project_id != project.id or row.deleted_at is not None:
        raise not_found("file", file_id, param="file_id")
    return row


OwnedFile = Annotated[File, Depends(owned_file)]


# --- routes --------------------------------------------------------------------------------------

@router.post("", status_code=201, summary="Upload a file", openapi_extra={"requestBody": UPLOAD_BODY},
             responses={200: {"model": FilePublic, "description": "The same bytes were already uploaded for "
                                                                  "this purpose: the existing file."},
                        **problem_responses(400, 401, 413, 415, 422, 429)})
async def upload_file(request: Request, response: Response, db: SessionDep,
                      project: CurrentProject) -> FilePublic:
    """Upload a parquet or JSON Lines dataset; it is checked for its purpose and deduplicated by content."""
    project_id = project.id
    await run_in_threadpool(db.commit)  # hand the connection back to the pool while the body streams
    storage = get_storage()
    file_id = new_id("file")
    key = f"files/{project_id}/{file_id}"
    # Every call that touches the store runs in a thread (a remote store blocks on the network).
    pending = await run_in_threadpool(storage.begin_write, key)
    try:
        upload = await receive_upload(request, pending.file)
        existing = await run_in_threadpool(_live_file, db, project_id, upload.purpose, upload.sha256)
        if existing is not None:
            raise _Duplicate(existing)
        if storage.is_local:  # check the partial in place: only checked bytes get the real name
            await run_in_threadpool(pending.file.flush)
            info = await run_in_threadpool(_inspect, pending.path, upload.purpose)
        await run_in_threadpool(pending.commit)
    except _Duplicate as dup:
        await _shielded(pending.abort)
        response.status_code = 200
        return FilePublic.of(dup.row)
    except BaseException:
        await _shielded(pending.abort)
        raise
    try:
        if not storage.is_local:  # a remote object is readable only once closed: check it now
            info = await run_in_threadpool(_inspect_stored, storage, key, upload.purpose)
        row = File(id=file_id, project_id=project_id, purpose=upload.purpose, filename=upload.filename,
                   bytes=upload.size, sha256=upload.sha256, format=info.format, rows=info.rows,
                   columns=info.columns, stats=info.stats, status="processed", storage_key=key,
                   meta=upload.metadata)
        existing = await run_in_threadpool(_insert, db, row)
    except BaseException:
        await _shielded(storage.delete, key)
        raise
    if existing is not None:  # lost a race with an identical upload: keep the winner
        await run_in_threadpool(storage.delete, key)
        response.status_code = 200
        return FilePublic.of(existing)
    return FilePublic.of(row)


@router.get("", summary="List files", responses=problem_responses(401, 422, 429))
def list_files(db: SessionDep, project: CurrentProject, limit: LimitQuery = 20, after: AfterQuery = None,
               purpose: Annotated[FilePurpose | None, Query(description="Only files of this purpose.")] = None
               ) -> FilesPublic:
    """List the project's files, newest first."""
    stmt = select(File).where(File.project_id == project.id, File.deleted_at.is_(None))
    if purpose is not None:
        stmt = stmt.where(File.purpose == purpose)
    rows, has_more = paginate(db, stmt, File.id, limit=limit, after=after)
    return FilesPublic(**page_of([FilePublic.of(r) for r in rows], has_more))


@router.get("/{file_id}", summary="Retrieve a file", responses=problem_responses(401, 404, 429))
def retrieve_file(file: OwnedFile) -> FilePublic:
    """Retrieve a file's description and statistics."""
    return FilePublic.of(file)


@router.get("/{file_id}/content", summary="Download a file's content", response_class=StreamingResponse,
            responses={200: {"description": "The bytes as uploaded.",
                             "content": {media: {"schema": {"type": "string", "format": "binary"}}
                                         for media in ("application/octet-stream", *_MEDIA_TYPES.values())}},
                       **problem_responses(401, 404, 429)})
def download_file_content(file: OwnedFile) -> StreamingResponse:
    """Stream the file's bytes exactly as uploaded."""
    try:
        handle = get_storage().open(file.storage_key)
    except FileNotFoundError as e:
        raise ApiError(404, "not_found", f"The content of file {file.id!r} is missing.", param="file_id") from e
    return StreamingResponse(_chunks(handle), media_type=_MEDIA_TYPES.get(file.format, "application/octet-stream"),
                             headers={"Content-Length": str(file.bytes),
                                      "Content-Disposition": _attachment(file.filename)})


@router.get("/{file_id}/preview", summary="Preview a file", responses=problem_responses(401, 404, 422, 429))
def preview_file(file: OwnedFile, limit: Annotated[int, Query(ge=1, le=100, description="Rows (1-100).")] = 5
                 ) -> FilePreview:
    """Return the first rows of a file as JSON (the purpose's columns only)."""
    with get_storage().open(file.storage_key) as f:
        rows = preview_rows(f, file.purpose, limit)
    return FilePreview(file_id=file.id, data=rows)


@router.delete("/{file_id}", summary="Delete a file", responses=problem_responses(401, 404, 409, 429))
def delete_file(file: OwnedFile, db: SessionDep) -> FileDeleted:
    """Delete a file; refused while a queued or running job uses it."""
    db.refresh(file, with_for_update=True)  # a job committed meanwhile is seen by the check below
    job = db.execute(select(Job.id, Job.status).where(
        or_(Job.training_file_id == file.id, Job.validation_file_id == file.id),
        Job.status.in_(ACTIVE_JOB_STATUSES)).limit(1)).first()
    if job is not None:
        raise ApiError(409, "file_in_use", f"File {file.id!r} is used by job {job.id!r} ({job.status}); "
                       "cancel the job or wait for it to finish.", param="file_id")
    # The row stays (finished jobs reference it) but is never served again; the bytes go.
    file.deleted_at = utcnow()
    db.commit()
    try:
        get_storage().delete(file.storage_key)
    except OSError:
        log.warning("could not remove the bytes of deleted file %s at %s", file.id, file.storage_key)
    return FileDeleted(id=file.id)


# --- upload helpers ------------------------------------------------------------------------------

async def _shielded(fn, *args) -> None:
    """Clean-up in a thread that a cancelled request (a client gone mid-upload) still completes."""
    with anyio.CancelScope(shield=True):
        await run_in_threadpool(fn, *args)


class _Duplicate(Exception):
    def __init__(self, row: File) -> None:
        self.row = row


def _live_file(db: Session, project_id: str, purpose: str, sha256: str) -> File | None:
    return db.scalar(select(File).where(File.project_id == project_id, File.purpose == purpose,
                                        File.sha256 == sha256, File.deleted_at.is_(None)))


def _insert(db: Session, row: File) -> File | None:
    """Commit `row`; None on success, else the identical file that won a concurrent upload."""
    db.add(row)
    try:
        db.commit()
    except IntegrityError:
        db.rollback()
        existing = _live_file(db, row.project_id, row.purpose, row.sha256)
        if existing is None:
            raise
        return existing
    return None


def _dataset_error(e: DatasetError, purpose: str) -> ApiError:
    where = {k: v for k, v in (("row", e.row), ("line", e.line)) if v is not None}
    errors = [{"param": e.param, "msg": e.detail, "type": e.code, **where}] if where else None
    # OpenAI's upload: a 400 (the openai client's BadRequestError); every /v1/files problem carries OpenAI's
    # `error` object (api/openai/errors.py).
    return ApiError(400 if purpose == "fine-tune" else 422, e.code, e.detail, param=e.param, errors=errors)


def _inspect(path: str, purpose: str) -> DatasetInfo:
    try:
        return inspect_dataset(path, purpose)
    except DatasetError as e:
        raise _dataset_error(e, purpose) from e


def _inspect_stored(storage: Storage, key: str, purpose: str) -> DatasetInfo:
    try:
        with storage.open(key) as f:
            return inspect_dataset(f, purpose)
    except DatasetError as e:
        raise _dataset_error(e, purpose) from e


def clean_filename(raw: str | None) -> str:
    """The base name of a client-sent file name: no directories, no `..`, printable, <= 255 chars."""
    name = (raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if ch.isprintable()).strip()
    return "upload" if name in ("", ".", "..") else name[:255]


def parse_metadata(text: str) -> dict[str, str]:
    """The `metadata` form field: a JSON object of up to 16 string pairs."""
    def bad(detail: str) -> ApiError:
        return ApiError(422, "invalid_request", f"metadata: {detail}", param="metadata")

    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise bad(f"not valid JSON ({e.msg})") from e
    if not isinstance(value, dict):
        raise bad(f"must be a JSON object of string pairs, got {type(value).__name__}")
    if len(value) > _MAX_METADATA_PAIRS:
        raise bad(f"{len(value)} pairs; at most {_MAX_METADATA_PAIRS} are allowed")
    for k, v in value.items():
        if not isinstance(v, str):
            raise bad(f"the value of {k!r} must be a string")
        if len(k) > _MAX_METADATA_KEY or len(v) > _MAX_METADATA_VALUE:
            raise bad(f"keys are limited to {_MAX_METADATA_KEY} characters and values to {_MAX_METADATA_VALUE}")
    if has_nul(value):
        raise bad(NUL_MESSAGE)
    return value


def _too_large() -> ApiError:
    return ApiError(413, "file_too_large", f"The file is larger than the limit of {settings.MAX_UPLOAD_BYTES} "
                    "bytes.", param="file")


class _FormReader:
    """Feeds a multipart/form-data body to python-multipart's streaming parser.

    The `file` part's data collects in `pending` (the caller drains it to storage, hashing on the
    way); `purpose` and `metadata` are small, kept, and checked as soon as their part ends.
    """

    def __init__(self, boundary: bytes) -> None:
        self.parser = MultipartParser(boundary, callbacks={
            "on_part_begin": self._part_begin, "on_header_field": self._header_field,
            "on_header_value": self._header_value, "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished, "on_part_data": self._part_data,
            "on_part_end": self._part_end, "on_end": self._end})
        self.pending = bytearray()
        self.size = 0
        self.filename: str | None = None
        self.purpose: str | None = None
        self.metadata: dict[str, str] = {}
        self.finished = False
        self._parts = 0
        self._seen: set[str] = set()
        self._name = ""
        self._in_file = False
        self._field = bytearray()
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._disposition = b""

    def write(self, chunk: bytes) -> None:
        self.parser.write(chunk)

    def _part_begin(self) -> None:
        self._parts += 1
        if self._parts > _MAX_PARTS:
            raise ApiError(422, "invalid_request", f"At most {_MAX_PARTS} form parts are accepted.")
        self._disposition, self._field, self._in_file = b"", bytearray(), False

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        if bytes(self._header_name).lower() == b"content-disposition":
            self._disposition = bytes(self._header_value)
        self._header_name, self._header_value = bytearray(), bytearray()

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        self._name = options.get(b"name", b"").decode("utf-8", "replace")
        if self._name not in ("file", "purpose", "metadata"):
            raise ApiError(422, "unknown_parameter", f"Unknown form field {self._name!r}; expected file, "
                           "purpose and metadata.", param=self._name or None)
        if self._name in self._seen:
            raise ApiError(422, "invalid_request", f"The form field {self._name!r} is given twice.",
                           param=self._name)
        self._seen.add(self._name)
        if self._name == "file":
            self._in_file = True
            self.filename = clean_filename(options.get(b"filename", b"").decode("utf-8", "replace"))

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._in_file:
            self.pending += data[start:end]
            self.size += end - start
            return
        self._field += data[start:end]
        if len(self._field) > _MAX_FIELD_BYTES:
            raise ApiError(422, "invalid_request", f"The form field {self._name!r} is longer than "
                           f"{_MAX_FIELD_BYTES} bytes.", param=self._name)

    def _part_end(self) -> None:
        if self._in_file:
            return
        try:
            text = self._field.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ApiError(422, "invalid_request", f"{self._name}: not UTF-8 text.", param=self._name) from e
        if self._name == "purpose":
            if text in OUTPUT_PURPOSES:
                raise ApiError(422, "invalid_request", f"purpose: {text!r} files are written by Keel's jobs; "
                               f"upload one of {', '.join(PURPOSES)}.", param="purpose")
            if text not in PURPOSES:
                raise ApiError(422, "invalid_request", f"purpose: must be one of {', '.join(PURPOSES)}; "
                               f"got {text[:40]!r}.", param="purpose")
            self.purpose = text
        else:
            self.metadata = parse_metadata(text)

    def _end(self) -> None:
        self.finished = True


@dataclass
class Upload:
    """What `receive_upload` got: the checked form fields and the file's size and digest."""

    purpose: str
    filename: str
    metadata: dict[str, str]
    size: int
    sha256: str


async def receive_upload(request: Request, sink: BinaryIO) -> Upload:
    """Stream a multipart upload's `file` part into `sink`, hashing it; stop at the size limit."""
    mime, options = parse_options_header(request.headers.get("content-type", ""))
    if mime != b"multipart/form-data" or not options.get(b"boundary"):
        raise ApiError(415, "unsupported_media_type", "Send the upload as multipart/form-data with the "
                       "fields file, purpose and (optionally) metadata.")
    limit = settings.MAX_UPLOAD_BYTES
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit + _FORM_OVERHEAD:
        raise _too_large()  # refused before reading a byte
    reader = _FormReader(options[b"boundary"])
    digest = hashlib.sha256()

    def store(data: bytes) -> None:  # in a worker thread: hashing and disk writes stay off the event loop
        digest.update(data)
        sink.write(data)

    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            reader.write(chunk)
            if reader.size > limit or received > limit + _FORM_OVERHEAD:
                raise _too_large()  # stop reading now; the caller's writer drops the partial file
            if len(reader.pending) >= _WRITE_BYTES:
                data = bytes(reader.pending)
                reader.pending.clear()
                await run_in_threadpool(store, data)
    except MultipartParseError as e:
        raise ApiError(422, "invalid_request", f"Malformed multipart body: {e}", param="file") from e
    except ClientDisconnect as e:  # nobody reads the answer; it keeps the log free of a traceback
        raise ApiError(400, "client_disconnected", "The client disconnected during the upload.") from e
    if reader.pending:
        await run_in_threadpool(store, bytes(reader.pending))
        reader.pending.clear()
    if not reader.finished:
        raise ApiError(422, "invalid_request", "The multipart body is incomplete.", param="file")
    if reader.filename is None:
        raise ApiError(422, "invalid_request", "file: a file part is required.", param="file")
    if reader.purpose is None:
        raise ApiError(422, "invalid_request", "purpose: required (preference, prompts or sft).",
                       param="purpose")
    return Upload(reader.purpose, reader.filename, reader.metadata, reader.size, digest.hexdigest())


# --- download helpers ----------------------------------------------------------------------------

def _chunks(handle: BinaryIO) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(_WRITE_BYTES):
            yield chunk


def _attachment(filename: str) -> str:
    ascii_name = "".join(ch if ch.isascii() and ch not in '"\\' else "_" for ch in filename)
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"
