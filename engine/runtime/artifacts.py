"""The job's artifacts (datasets, models, checkpoints, outputs) as seen from whichever Ray node a
piece of the engine runs on.

A reference is either a local path or a URL. A local path means a local store, which deployments
mount at the same place on every node: it is used as it is, nothing is copied (local mode costs
nothing extra). A URL (`s3://bucket/prefix/jobs/...`) means a remote store: every process that reads
an artifact stages it into its own node's cache (`Artifacts.stage`), and every process that writes
one writes a local directory and uploads it (`Artifacts.writing`). Nothing assumes that two pieces
of a job share a filesystem.

- The cache (`cache_dir`, default `<system temp>/keel-artifacts`) is keyed by the URL and the
  remote listing (names, sizes, ETags), so a rewritten artifact is staged again and an unchanged
  one never is. A download goes to a temporary directory renamed into place under a per-entry file
  lock: concurrent processes on a node download once and never see half an entry.
- An upload removes the old copy (its completion marker first), uploads every file, and only then
  the marker (`COMPLETE` for checkpoints), so a reader that waits for the marker never sees a
  partial directory.

The engine does not import the service: the store's fsspec options (endpoint, credentials) travel in
the `JobRequest` (`storage_options`), and fsspec's backend for the URL's scheme (s3fs for `s3://`)
must be installed on every node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.config import JobRequest

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_VERSION_KEYS = ("ETag", "etag", "md5Hash", "generation", "LastModified", "mtime", "updated", "last_modified")
"""Info fields that change when an object is rewritten, in order of preference (S3, GCS, Azure, local)."""


def is_remote(ref: str | None) -> bool:
    """True for a URL of a remote store (`file://` counts as local)."""
    return bool(ref) and bool(_URL.match(ref)) and not ref.startswith("file://")


def join(ref: str, *parts: str) -> str:
    """`ref/part/...` for a URL or a local path."""
    if is_remote(ref):
        return "/".join([ref.rstrip("/"), *(p.strip("/") for p in parts)])
    return os.path.join(ref, *parts)


def _version(info: dict[str, Any]) -> str:
    for key in _VERSION_KEYS:
        if info.get(key) is not None:
            return str(info[key])
    return ""


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """An exclusive lock between processes (and threads) of this node on `path`."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Artifacts:
    """Reads and writes references for one job; picklable (it travels into every Ray worker).

    Args:
        options: fsspec options of the remote store (e.g. `{"endpoint_url": ...}`); unused for paths.
        cache_dir: this node's staging cache; None = `<system temp>/keel-artifacts`.
    """

    options: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = None

    @property
    def cache_root(self) -> str:
        return self.cache_dir or os.path.join(tempfile.gettempdir(), "keel-artifacts")

    def _fs(self, url: str) -> tuple[Any, str]:
        """(filesystem, path) of a URL, with the filesystem's listing cache for that path dropped:
        another process (another node) may have written there since this one last looked."""
        import fsspec

        fs, path = fsspec.core.url_to_fs(url, **self.options)
        fs.invalidate_cache(path)
        return fs, path

    # --- reading ---------------------------------------------------------------------------------

    def exists(self, ref: str) -> bool:
        if not is_remote(ref):
            return os.path.exists(ref)
        fs, path = self._fs(ref)
        return fs.exists(path)

    def stage(self, ref: str) -> str:
        """A local path holding `ref` (a file or a directory): `ref` itself unless it is a URL, else
        this node's cached copy, downloaded first if the cache has no copy of this version.
        A missing remote artifact raises `FileNotFoundError`."""
        if not is_remote(ref):
            return ref
        fs, path = self._fs(ref)
        info = fs.info(path)
        is_dir = info["type"] == "directory"
        if is_dir:
            files = {p: i for p, i in fs.find(path, detail=True).items() if i["type"] != "directory"}
            rel = {p: p[len(path):].lstrip("/") for p in files}
            listing = sorted((rel[p], i.get("size"), _version(i)) for p, i in files.items())
        else:
            listing = [("", info.get("size"), _version(info))]
        key = hashlib.sha256(json.dumps([ref.rstrip("/"), listing], default=str).encode()).hexdigest()[:40]
        root = self.cache_root
        final = os.path.join(root, key)
        target = final if is_dir else os.path.join(final, os.path.basename(path.rstrip("/")) or "data")
        if os.path.exists(final):  # the common case after the first job on a node: no lock, no copy
            return target
        os.makedirs(root, exist_ok=True)
        with _locked(f"{final}.lock"):
            if os.path.exists(final):  # another process staged it while this one waited
                return target
            tmp = os.path.join(root, f".tmp-{key}-{uuid.uuid4().hex[:8]}")
            os.makedirs(tmp)
            try:
                if is_dir:
                    remote = sorted(files)
                    local = [os.path.join(tmp, rel[p]) for p in remote]
                    for dest in local:
                        os.makedirs(os.path.dirname(dest), exist_ok=True)
                    if remote:
                        fs.get(remote, local)
                else:
                    fs.get_file(path, os.path.join(tmp, os.path.basename(target)))
                os.rename(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        return target

    # --- writing ---------------------------------------------------------------------------------

    def remove(self, ref: str, marker: str = "COMPLETE") -> None:
        """Delete a remote directory, its `marker` first (a reader never sees a complete but
        shrinking copy). Local references are left to their writers (`engine.runtime.checkpoint.atomic_dir`)."""
        if not is_remote(ref):
            raise ValueError(f"remove() takes a remote reference, not {ref!r}")
        fs, path = self._fs(ref)
        if fs.exists(f"{path}/{marker}"):
            fs.rm(f"{path}/{marker}")
        if fs.exists(path):
            fs.rm(path, recursive=True)

    def upload(self, local_dir: str, ref: str, *, marker: str | None = None) -> None:
        """Replace the remote directory `ref` with the files of `local_dir`; `marker` (a file name in
        `local_dir`), if given, goes last, once every other file is in place."""
        fs, path = self._fs(ref)
        self.remove(ref, marker or "COMPLETE")
        sources, dests = [], []
        for dirpath, _, names in os.walk(local_dir):
            for name in sorted(names):
                rel = os.path.relpath(os.path.join(dirpath, name), local_dir).replace(os.sep, "/")
                if rel != marker:
                    sources.append(os.path.join(dirpath, name))
                    dests.append(f"{path}/{rel}")
        if sources:
            fs.put(sources, dests)
        if marker is not None:
            fs.put_file(os.path.join(local_dir, marker), f"{path}/{marker}")

    def put_marker(self, ref: str, marker: str = "COMPLETE") -> None:
        """Write the (small) marker file `ref/marker`."""
        if is_remote(ref):
            fs, path = self._fs(ref)
            fs.pipe_file(f"{path}/{marker}", b"ok\n")
        else:
            with open(os.path.join(ref, marker), "w") as f:
                f.write("ok\n")

    def _scratch(self) -> str:
        scratch = os.path.join(self.cache_root, "scratch")
        os.makedirs(scratch, exist_ok=True)
        return tempfile.mkdtemp(dir=scratch)

    @contextlib.contextmanager
    def writing(self, ref: str, *, marker: str | None = None) -> Iterator[str]:
        """Yield a local directory to write `ref`'s files into. A local `ref` is that directory
        itself (created); a remote one is a scratch directory uploaded when the block succeeds
        (with `marker` written and uploaded last) and deleted in any case."""
        if not is_remote(ref):
            os.makedirs(ref, exist_ok=True)
            yield ref
            if marker is not None:
                self.put_marker(ref, marker)
            return
        scratch = self._scratch()
        try:
            yield scratch
            if marker is not None:
                self.put_marker(scratch, marker)
            self.upload(scratch, ref, marker=marker)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    @contextlib.contextmanager
    def adding(self, ref: str, *, marker: str | None = None) -> Iterator[str]:
        """Like `writing`, but the files join what `ref` already holds (several writers fill one
        directory: fsdp2 workers each add their shards); `marker`, if given, is added last."""
        if not is_remote(ref):
            os.makedirs(ref, exist_ok=True)
            yield ref
            if marker is not None:
                self.put_marker(ref, marker)
            return
        scratch = self._scratch()
        try:
            yield scratch
            fs, path = self._fs(ref)
            files = [os.path.join(d, n) for d, _, names in os.walk(scratch) for n in sorted(names)]
            if files:
                fs.put(files, [f"{path}/{os.path.relpath(f, scratch).replace(os.sep, '/')}" for f in files])
            if marker is not None:
                self.put_marker(ref, marker)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    @contextlib.contextmanager
    def writing_file(self, ref: str) -> Iterator[str]:
        """Yield a local path to write one file into; on success it replaces `ref` whole (renamed
        into place, or uploaded)."""
        if not is_remote(ref):
            os.makedirs(os.path.dirname(ref) or ".", exist_ok=True)
            tmp = f"{ref}.tmp-{uuid.uuid4().hex[:8]}"
            try:
                yield tmp
                os.replace(tmp, ref)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
            return
        scratch = self._scratch()
        try:
            local = os.path.join(scratch, os.path.basename(ref.rstrip("/")))
            yield local
            fs, path = self._fs(ref)
            fs.put_file(local, path)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def for_request(request: JobRequest) -> Artifacts:
    return Artifacts(dict(request.storage_options), request.artifact_cache_dir)


def localize(request: JobRequest, artifacts: Artifacts | None = None) -> JobRequest:
    """`request` with its inputs (model, teacher, training and validation files) staged on this node.
    Outputs, checkpoints and the resume checkpoint stay references (written and read where used)."""
    store = artifacts or for_request(request)
    if not any(is_remote(r) for r in (request.model_path, request.teacher_path, request.training_file,
                                      request.validation_file)):
        return request
    return dataclasses.replace(
        request, model_path=store.stage(request.model_path), training_file=store.stage(request.training_file),
        validation_file=store.stage(request.validation_file) if request.validation_file else None,
        teacher_path=store.stage(request.teacher_path) if request.teacher_path else None)


def content_digest(path: str | None) -> str | None:
    """sha256 of a local file, or of every file under a local directory (relative names and bytes,
    in name order): what a cache of a model's outputs must be keyed by. File sizes or paths are not
    enough: retrained weights keep both."""
    if not path:
        return None
    files = ([(os.path.relpath(os.path.join(root, name), path), os.path.join(root, name))
              for root, _, names in os.walk(path) for name in names] if os.path.isdir(path)
             else [(os.path.basename(path), path)])
    digest = hashlib.sha256()
    for rel, full in sorted(files):
        digest.update(rel.encode() + b"\0")
        with open(full, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
