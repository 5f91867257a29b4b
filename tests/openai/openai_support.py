"""Helpers of the OpenAI-compatibility tests (a named module: `conftest` is ambiguous on sys.path)."""

from __future__ import annotations

import json
from pathlib import Path


def jsonl(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
