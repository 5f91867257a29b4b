"""Shared by the trainer tests: a fake local model directory, request bodies, problem checks."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

VOCAB = 100
WINDOW = 64


def fake_model(keel_home: Path, vocab: int = VOCAB, window: int = WINDOW) -> str:
    """A directory under the model root with just a config.json (the API reads the vocabulary and the
    context window from it; nothing here is ever loaded)."""
    path = keel_home / "models" / f"fake-{secrets.token_hex(4)}"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"vocab_size": vocab, "max_position_embeddings": window}))
    return str(path)


def datum(n: int = 4, **inputs) -> dict:
    return {"model_input": list(range(1, n + 1)), "loss_fn_inputs": inputs}


def ce_datum(n: int = 4) -> dict:
    return datum(n, target_tokens=list(range(2, n + 2)), weights=[1.0] * n)


def assert_problem(r, status: int, code: str, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["code"] == code, body
    if param is not None:
        assert body.get("param") == param, body
    return body
