"""Directories of the artifact store as tar archives streamed on the fly (checkpoint and model
downloads).

An archive is planned first (`plan`: the files of one or more directories, listed now, each under a
name in the archive) and then generated piece by piece (`stream`): a hand-written ustar/PAX stream,
so no file is ever held in memory whole, read through fsspec from a local directory or a remote
store alike. Both block on the store: call them from sync handlers (a threadpool) and hand `stream`
to a `StreamingResponse`, which iterates a sync generator in a thread too. Regular files only:
symbolic links (and whatever lies under a linked directory) are left out.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from core.storage import Storage

CHUNK = 1024 * 1024
"""Bytes read (and sent) at a time: a download's memory stays at about this much."""


@dataclass(frozen=True)
class Entry:
    name: str
    """Path inside the archive, below its root directory."""
    location: str
    size: int
    mtime: float


def _mtime(info: dict) -> float:
    modified = info.get("mtime") or info.get("LastModified") or info.get("last_modified") or 0
    return modified.timestamp() if hasattr(modified, "timestamp") else float(modified)


def files(storage: Storage, location: str, *, prefix: str = "",
          keep: Callable[[str], bool] = lambda rel: True) -> list[Entry]:
    """The files under the directory `location` for which `keep(relative path)` holds, named
    `prefix/relative path` in the archive; none when the directory is missing."""
    fs, root = storage.resolve(location)
    root = root.rstrip("/")
    if not fs.isdir(root):
        return []
    found = fs.find(root, withdirs=True, detail=True)
    links = [name.rstrip("/") + "/" for name, info in found.items() if info.get("islink")]
    out = []
    for name, info in found.items():
        if info["type"] == "directory" or info.get("islink") or any(name.startswith(link) for link in links):
            continue
        rel = name[len(root):].lstrip("/")
        if keep(rel):
            out.append(Entry(f"{prefix}/{rel}" if prefix else rel, f"{location.rstrip('/')}/{rel}",
                             int(info.get("size") or 0), _mtime(info)))
    return sorted(out, key=lambda e: e.name)


def _header(name: str, mtime: float, size: int, *, directory: bool = False) -> bytes:
    info = tarfile.TarInfo(name)
    info.mtime = int(mtime)
    info.mode = 0o755 if directory else 0o644
    info.type, info.size = (tarfile.DIRTYPE, 0) if directory else (tarfile.REGTYPE, size)
    return info.tobuf(format=tarfile.PAX_FORMAT)


def stream(storage: Storage, entries: list[Entry], root: str) -> Iterator[bytes]:
    """A tar of `entries` under the directory `root`: the directories first (parents before
    children), then each file in `CHUNK`s, exactly the size listed even if it changed since."""
    newest = max((e.mtime for e in entries), default=0.0)
    parts = [e.name.split("/") for e in entries]
    dirs = sorted({"/".join(p[:i]) for p in parts for i in range(1, len(p))})
    yield _header(root, newest, 0, directory=True)
    for rel in dirs:
        yield _header(f"{root}/{rel}", newest, 0, directory=True)
    for entry in entries:
        yield _header(f"{root}/{entry.name}", entry.mtime, entry.size)
        with storage.open_location(entry.location) as f:
            left = entry.size
            while left > 0:
                chunk = f.read(min(CHUNK, left)) or b"\0" * min(CHUNK, left)
                left -= len(chunk)
                yield chunk
        if entry.size % tarfile.BLOCKSIZE:
            yield b"\0" * (tarfile.BLOCKSIZE - entry.size % tarfile.BLOCKSIZE)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)  # end of archive


def content_disposition(filename: str) -> dict[str, str]:
    """The download's file name (ids and fixed suffixes only: nothing to escape)."""
    return {"Content-Disposition": f'attachment; filename="{filename}"'}


# --- what a Hugging Face directory download holds ---------------------------------------------------

ADAPTER_DIR = "adapter"
"""Where `engine.models.save_model` puts a LoRA adapter beside the merged weights."""
TRAINER_STATE_DIR = "trainer"
"""Where an interactive trainer's `save_state` keeps its exact training state beside the model
(`engine.interactive.state`): not part of the model's download."""
_FULL_MODEL_FILES = ("config.json", "generation_config.json")


def _is_weights(rel: str) -> bool:
    return rel.endswith((".safetensors", ".safetensors.index.json", ".bin"))


def hf_files(storage: Storage, location: str, *, lora: bool, merged: bool, prefix: str = "") -> list[Entry]:
    """The files of a Hugging Face directory written by `engine.models.save_model` at `location`.

    A full model (`lora` False, or `merged`): the top-level directory without the `adapter/` copy.
    A LoRA adapter: `adapter/`'s files at the top, plus the tokenizer files beside the merged weights
    (everything there but weights and the full model's configs), so `PeftModel.from_pretrained(base,
    dir)` and `AutoTokenizer.from_pretrained(dir)` both work on the download.
    """
    if not lora or merged:
        return files(storage, location, prefix=prefix,
                     keep=lambda rel: not rel.startswith((f"{ADAPTER_DIR}/", f"{TRAINER_STATE_DIR}/")))
    adapter = files(storage, f"{location.rstrip('/')}/{ADAPTER_DIR}", prefix=prefix)
    if not adapter:
        return []
    have = {e.name for e in adapter}
    tokenizer = files(storage, location, prefix=prefix,
                      keep=lambda rel: "/" not in rel and not _is_weights(rel) and rel not in _FULL_MODEL_FILES)
    return adapter + [e for e in tokenizer if e.name not in have]


def is_lora_export(storage: Storage, location: str) -> bool:
    """True when the export at `location` has an `adapter/` beside its merged weights."""
    fs, root = storage.resolve(f"{location.rstrip('/')}/{ADAPTER_DIR}/adapter_config.json")
    return fs.isfile(root)
