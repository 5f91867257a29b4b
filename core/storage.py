"""The artifact store: uploaded files, checkpoints, models. A local directory by default, any
fsspec URL otherwise. Writes go to a temporary name and are renamed into place, so a crash never
leaves a half-written object visible under its real key."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import fsspec

from core.config import settings


class Storage:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.is_local = self.fs.protocol in ("file", ("file", "local")) or "file" in self.fs.protocol
        if self.is_local:
            Path(self.root).mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> str:
        """Full path of `key`; keys are Keel-made (ids), never user input."""
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"bad storage key {key!r}")
        return f"{self.root}/{key}"

    def local_path(self, key: str) -> Path:
        """A local filesystem path for `key` (workers read datasets and write models there)."""
        if not self.is_local:
            raise RuntimeError("local_path needs a local storage backend")
        return Path(self.path(key))

    @contextmanager
    def writer(self, key: str) -> Iterator[BinaryIO]:
        """Open `key` for writing; visible only after the block exits cleanly."""
        final = self.path(key)
        tmp = f"{final}.partial-{uuid.uuid4().hex}"
        self.fs.makedirs(os.path.dirname(final), exist_ok=True)
        f = self.fs.open(tmp, "wb")
        try:
            yield f
            f.close()
            self.fs.mv(tmp, final)
        except BaseException:
            f.close()
            self.fs.rm(tmp)
            raise

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


_storage: Storage | None = None


def get_storage() -> Storage:
    global _storage
    if _storage is None or _storage.url != settings.storage_url.rstrip("/"):
        _storage = Storage(settings.storage_url)
    return _storage
