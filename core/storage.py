"""The artifact store: uploaded files, checkpoints, models. A local directory by default (mounted at
the same path on every Ray node), or a remote fsspec URL (`s3://bucket/prefix`, with
`KEEL_STORAGE_OPTIONS`); see docs/storage.md.

Objects are addressed by key (`files/<project>/<id>`, `jobs/<job>/checkpoints/step_3`). Jobs get
*locations*: the absolute path of a key in a local store, its URL (`s3://...`) in a remote one; the
engine stages and uploads them itself (`engine.runtime.artifacts`), and checkpoints and models are recorded
by location. Writes are never half-visible under their real key: a local write goes to a temporary
name renamed into place; an object store publishes an object only when its upload completes, so a
remote write goes straight to its key and an aborted one is discarded.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import fsspec

from core.config import settings

COMPLETE_MARKER = "COMPLETE"
"""Written last into a checkpoint directory (`engine.runtime.checkpoint`); without it a directory is ignored."""
_OBJECT_STORES = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "r2"}
"""Protocols whose uploads become visible whole, at completion (so no temporary name is needed)."""


def is_url(location: str) -> bool:
    return "://" in location and not location.startswith("file://")


@dataclass
class PendingWrite:
    """An object being written: `file` to write to, then `commit()` (visible under its key) or
    `abort()` (gone). Both block on the store: async callers run them in a thread."""

    file: BinaryIO
    path: str
    """Where the bytes go until `commit` (the temporary local file, for a local store)."""
    final: str
    fs: Any
    in_place: bool

    def commit(self) -> None:
        self.file.close()
        if not self.in_place:
            self.fs.mv(self.path, self.final)

    def abort(self) -> None:
        if self.in_place and hasattr(self.file, "discard"):
            self.file.discard()  # drops the buffer and aborts a multipart upload: nothing is published
            self.file.closed = True  # else its finaliser would try to complete the upload
            return
        self.file.close()
        if self.fs.exists(self.path):
            self.fs.rm(self.path)


class Storage:
    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/")
        self.options = dict(options or {})
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **self.options)
        protocols = {self.fs.protocol} if isinstance(self.fs.protocol, str) else set(self.fs.protocol)
        self.is_local = "file" in protocols or "local" in protocols
        self._in_place = bool(protocols & _OBJECT_STORES)
        if self.is_local:
            Path(self.root).mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> str:
        """Full path of `key` in the store's filesystem; keys are Keel-made (ids), never user input."""
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"bad storage key {key!r}")
        return f"{self.root}/{key}"

    def location(self, key: str) -> str:
        """What a job is given for `key`: the local path, or the URL of a remote store."""
        return self.path(key) if self.is_local else self.fs.unstrip_protocol(self.path(key))

    def local_path(self, key: str) -> Path:
        """A local filesystem path for `key` (a local store only)."""
        if not self.is_local:
            raise RuntimeError("local_path needs a local storage backend")
        return Path(self.path(key))

    def begin_write(self, key: str) -> PendingWrite:
        """Start writing `key` (see `PendingWrite`); blocking."""
        final = self.path(key)
        if self._in_place:
            return PendingWrite(self.fs.open(final, "wb"), final, final, self.fs, True)
        tmp = f"{final}.partial-{uuid.uuid4().hex}"
        self.fs.makedirs(os.path.dirname(final), exist_ok=True)
        return PendingWrite(self.fs.open(tmp, "wb"), tmp, final, self.fs, False)

    @contextmanager
    def writer(self, key: str) -> Iterator[BinaryIO]:
        """Open `key` for writing; visible only after the block exits cleanly."""
        pending = self.begin_write(key)
        try:
            yield pending.file
        except BaseException:
            pending.abort()
            raise
        pending.commit()

    def open(self, key: str) -> BinaryIO:
        return self.fs.open(self.path(key), "rb")

    def exists(self, key: str) -> bool:
        return self.fs.exists(self.path(key))

    def delete(self, key: str) -> None:
        path = self.path(key)
        if self.is_local and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def size(self, key: str) -> int:
        return int(self.fs.size(self.path(key)))

    # --- locations: where a checkpoint or model was recorded (a path, a URL, or a key) -------------

    def resolve(self, location: str) -> tuple[Any, str]:
        """(filesystem, path) of a recorded location, its listing cache dropped (the engine writes
        from other processes)."""
        if is_url(location):
            fs, path = fsspec.core.url_to_fs(location, **self.options)
        elif os.path.isabs(location):
            fs, path = fsspec.filesystem("file"), location
        else:
            fs, path = self.fs, self.path(location)
        fs.invalidate_cache(path)
        return fs, path

    def is_complete(self, location: str) -> bool:
        """True when the checkpoint directory at `location` holds its completion marker."""
        fs, path = self.resolve(location)
        return fs.isfile(f"{path.rstrip('/')}/{COMPLETE_MARKER}")

    def subdirs(self, location: str) -> list[tuple[str, str]]:
        """(name, location) of the directories directly under `location` (none if it is missing)."""
        fs, path = self.resolve(location)
        if not fs.isdir(path):
            return []
        base = location.rstrip("/")
        out = []
        for info in fs.ls(path, detail=True):
            if info["type"] == "directory":
                name = info["name"].rstrip("/").rsplit("/", 1)[-1]
                out.append((name, f"{base}/{name}"))
        return out

    def tree(self, location: str) -> list[tuple[str, int, float]]:
        """(relative path, size, mtime) of every file under the directory `location`, sorted."""
        fs, path = self.resolve(location)
        path = path.rstrip("/")
        out = []
        for name, info in fs.find(path, detail=True).items():
            if info["type"] == "directory":
                continue
            modified = info.get("mtime") or info.get("LastModified") or info.get("last_modified") or 0
            mtime = modified.timestamp() if hasattr(modified, "timestamp") else float(modified)
            out.append((name[len(path):].lstrip("/"), int(info.get("size") or 0), mtime))
        return sorted(out)

    def tree_bytes(self, location: str) -> int:
        return sum(size for _, size, _ in self.tree(location))

    def open_location(self, location: str) -> BinaryIO:
        fs, path = self.resolve(location)
        return fs.open(path, "rb")


_storage: Storage | None = None


def get_storage() -> Storage:
    global _storage
    if (_storage is None or _storage.url != settings.storage_url.rstrip("/")
            or _storage.options != settings.STORAGE_OPTIONS):
        _storage = Storage(settings.storage_url, settings.STORAGE_OPTIONS)
    return _storage
