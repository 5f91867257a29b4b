"""The shared base models: Hugging Face model directories (a `config.json`) under the deployment's
model roots (`KEEL_MODEL_ROOTS`), which every project may train from and run. `GET /v1/models` lists
them beside the project's own models; a model's id is its absolute directory, the string any `model`
field takes."""

from __future__ import annotations

import os
from dataclasses import dataclass

from core.config import settings

MAX_DEPTH = 3
"""Directories below a root looked into (`root/org/name` is depth 2)."""
MAX_MODELS = 200
"""At most this many are listed (a root holding a whole hub mirror still answers quickly)."""


@dataclass(frozen=True)
class SharedModel:
    path: str
    name: str
    """The directory relative to its model root."""
    created: int


def base_models() -> list[SharedModel]:
    """Model directories under the model roots, sorted by path; a model's own subdirectories (a
    tokenizer beside it) are not looked into."""
    found: list[SharedModel] = []
    for root in settings.model_roots:
        _scan(root, root, 0, found)
        if len(found) >= MAX_MODELS:
            break
    return sorted(found[:MAX_MODELS], key=lambda m: m.path)


def _scan(root: str, directory: str, depth: int, found: list[SharedModel]) -> None:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if len(found) >= MAX_MODELS:
            return
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue  # symlinks are not followed: a link out of the root lists nothing
        config = os.path.join(entry.path, "config.json")
        if os.path.isfile(config):
            found.append(SharedModel(path=entry.path, name=os.path.relpath(entry.path, root),
                                   created=int(os.stat(config).st_mtime)))
        elif depth + 1 < MAX_DEPTH:
            _scan(root, entry.path, depth + 1, found)
