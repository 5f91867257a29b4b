"""A job's checkpoints, and a checkpoint's files as a tar streamed on the fly."""

from __future__ import annotations

import math
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse
from sqlalchemy import select

from api.deps import CurrentProject, SessionDep
from api.errors import ApiError, not_found, problem_responses
from api.pagination import AfterQuery, LimitQuery, page_of, paginate
from api.routes.jobs import OwnedJob
from api.schemas.jobs import CheckpointPublic, CheckpointsPublic
from core.models import Checkpoint
from core.storage import Storage, get_storage, is_url

router = APIRouter(tags=["checkpoints"])

CHUNK = 1024 * 1024
"""Bytes read (and sent) at a time: the download's memory stays at about this much."""


def owned_checkpoint(checkpoint_id: Annotated[str, PathParam(max_length=64)], project: CurrentProject,
                     db: SessionDep) -> Checkpoint:
    """The path's checkpoint if it belongs to the caller's project, else 404."""
    ckpt = db.get(Checkpoint, checkpoint_id)
    if ckpt is None or ckpt.project_id != project.id:
        raise not_found("checkpoint", checkpoint_id, param="checkpoint_id")
    return ckpt


OwnedCheckpoint = Annotated[Checkpoint, Depends(owned_checkpoint)]


def checkpoint_public(c: Checkpoint) -> CheckpointPublic:
    metrics = {k: float(v) for k, v in (c.metrics or {}).items()
               if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
    return CheckpointPublic(id=c.id, job_id=c.job_id, step=c.step, metrics=metrics, bytes=c.bytes,
                            created_at=int(c.created_at.timestamp()))


@router.get("/v1/jobs/{job_id}/checkpoints", summary="List job checkpoints", response_model=CheckpointsPublic,
            responses=problem_responses(401, 404, 422, 429))
def list_job_checkpoints(job: OwnedJob, db: SessionDep, limit: LimitQuery = 20, after: AfterQuery = None):
    """The job's checkpoints, newest first."""
    rows, has_more = paginate(db, select(Checkpoint).where(Checkpoint.job_id == job.id), Checkpoint.id,
                              limit=limit, after=after)
    return page_of([checkpoint_public(c) for c in rows], has_more)


def _directory(ckpt: Checkpoint) -> Path:
    """The checkpoint directory: an absolute path, or a key in the local artifact store."""
    return Path(ckpt.path) if os.path.isabs(ckpt.path) else get_storage().local_path(ckpt.path)


def _remote(ckpt: Checkpoint) -> bool:
    """A checkpoint recorded by URL, or by key in a remote store (streamed through fsspec)."""
    return is_url(ckpt.path) or (not os.path.isabs(ckpt.path) and not get_storage().is_local)


def store_tar_stream(storage: Storage, location: str, arcroot: str) -> Iterator[bytes]:
    """`tar_stream` of a directory in a remote store: its files as listed now, read in `CHUNK`s."""
    files = storage.tree(location)
    parts = [rel.split("/") for rel, _, _ in files]
    dirs = sorted({"/".join(p[:i]) for p in parts for i in range(1, len(p))})  # every ancestor, parents first
    newest = max((mtime for _, _, mtime in files), default=0.0)
    yield _header(arcroot, newest, 0o755, 0, directory=True)
    for rel in dirs:
        yield _header(f"{arcroot}/{rel}", newest, 0o755, 0, directory=True)
    base = location.rstrip("/")
    for rel, size, mtime in files:
        yield _header(f"{arcroot}/{rel}", mtime, 0o644, size)
        with storage.open_location(f"{base}/{rel}") as f:
            left = size
            while left > 0:  # exactly the size in the header, even if the object changes meanwhile
                chunk = f.read(min(CHUNK, left)) or b"\0" * min(CHUNK, left)
                left -= len(chunk)
                yield chunk
        if size % tarfile.BLOCKSIZE:
            yield b"\0" * (tarfile.BLOCKSIZE - size % tarfile.BLOCKSIZE)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)


def _header(name: str, mtime: float, mode: int, size: int, *, directory: bool = False) -> bytes:
    info = tarfile.TarInfo(name)
    info.mtime, info.mode = int(mtime), mode
    if directory:
        info.type, info.size = tarfile.DIRTYPE, 0
    else:
        info.size = size
    return info.tobuf(format=tarfile.PAX_FORMAT)


def tar_stream(root: Path, arcroot: str) -> Iterator[bytes]:
    """A ustar/PAX archive of `root` generated piece by piece (tarfile's stream format, written by hand so
    no file is ever held in memory whole). Regular files and directories only; symlinks are skipped."""
    def header(name: str, st: os.stat_result) -> bytes:
        return _header(name, st.st_mtime, stat.S_IMODE(st.st_mode), st.st_size, directory=stat.S_ISDIR(st.st_mode))

    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        here = Path(dirpath)
        rel = here.relative_to(root).as_posix()
        yield header(arcroot if rel == "." else f"{arcroot}/{rel}", here.stat())
        for name in sorted(filenames):
            path = here / name
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode):
                continue
            arcname = f"{arcroot}/{name}" if rel == "." else f"{arcroot}/{rel}/{name}"
            with path.open("rb") as f:
                st = os.fstat(f.fileno())
                yield header(arcname, st)
                left = st.st_size
                while left > 0:  # exactly the size in the header, even if the file changes meanwhile
                    chunk = f.read(min(CHUNK, left)) or b"\0" * min(CHUNK, left)
                    left -= len(chunk)
                    yield chunk
            if st.st_size % tarfile.BLOCKSIZE:
                yield b"\0" * (tarfile.BLOCKSIZE - st.st_size % tarfile.BLOCKSIZE)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)  # end of archive


@router.get("/v1/checkpoints/{checkpoint_id}/content", summary="Download checkpoint content",
            response_class=StreamingResponse,
            responses={200: {"content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
                             "description": "A tar of the checkpoint directory."},
                       **problem_responses(401, 404, 429)})
def download_checkpoint_content(ckpt: OwnedCheckpoint):
    """The checkpoint directory as a tar archive, streamed."""
    # A sync handler, and a sync generator Starlette iterates in a thread: the store's blocking
    # calls never run on the event loop.
    gone = ApiError(404, "checkpoint_unavailable", f"The files of checkpoint {ckpt.id} are no longer available.",
                    param="checkpoint_id")
    if _remote(ckpt):
        storage = get_storage()
        if not storage.is_complete(ckpt.path):
            raise gone
        stream = store_tar_stream(storage, ckpt.path, ckpt.id)
    else:
        root = _directory(ckpt)
        if not root.is_dir():
            raise gone
        stream = tar_stream(root, ckpt.id)
    return StreamingResponse(stream, media_type="application/x-tar",
                             headers={"Content-Disposition": f'attachment; filename="{ckpt.id}.tar"'})
