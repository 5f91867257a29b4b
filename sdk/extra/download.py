"""Download a model or a checkpoint as a Hugging Face directory, and unpack it safely.

Hand-written: sdk/extra/download.py is the source, copied into the generated package by `make sdk`.
The generated `download_model_content` / `download_checkpoint_content` return the whole tar in
memory; these helpers stream it to a temporary file and unpack it into a directory, refusing any
member that would land outside it.

    from keel_client import AuthenticatedClient, download_checkpoint, download_model

    client = AuthenticatedClient(base_url="http://127.0.0.1:8000", token="keel_...")
    download_model(client, "model-...", "rm")                   # then AutoModelFor...from_pretrained("rm")
    download_model(client, "model-...", "merged", merged=True)  # a LoRA model's merged weights
    download_checkpoint(client, "ckpt-...", "step", include_training_state=True)
"""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import IO, Any

import httpx

from .client import AuthenticatedClient

CHUNK = 1024 * 1024


class DownloadError(Exception):
    """The server refused the download (`status`, and its problem+json body in `problem`)."""

    def __init__(self, message: str, *, status: int | None = None, problem: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problem = problem or {}


class UnsafeArchive(DownloadError):
    """A member of the archive is absolute, climbs out with `..`, or is a link or a device."""


def _members(tar: tarfile.TarFile) -> list[tuple[tarfile.TarInfo, str]]:
    """(member, path below the archive's top directory) for every file and directory; raises
    `UnsafeArchive` on the first member that is not a plain file or directory inside it."""
    out = []
    for member in tar.getmembers():
        path = PurePosixPath(member.name)
        if member.name.startswith(("/", "\\")) or path.is_absolute() or ".." in path.parts or "\\" in member.name:
            raise UnsafeArchive(f"archive member {member.name!r} points outside the directory")
        if not (member.isfile() or member.isdir()):
            raise UnsafeArchive(f"archive member {member.name!r} is not a plain file or directory")
        rel = path.parts[1:]  # the top directory (the download's name) is dropped
        if rel:
            out.append((member, str(PurePosixPath(*rel))))
    return out


def extract_tar(fileobj: IO[bytes], directory: str | os.PathLike[str]) -> list[str]:
    """Unpack a Keel download (a tar whose members all lie under one top directory) into `directory`,
    the top directory dropped. Every member is checked before anything is written (`UnsafeArchive`).

    Returns:
        The relative paths of the files written.
    """
    out = Path(directory)
    with tarfile.open(fileobj=fileobj, mode="r:") as tar:
        members = _members(tar)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for member, rel in members:
            member.name = rel
            tar.extract(member, out, filter="data")  # "data" refuses anything that escapes, once more
            if member.isfile():
                written.append(rel)
    return written


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = json.loads(response.read())
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _download(client: AuthenticatedClient, path: str, params: dict[str, Any], directory: str | os.PathLike[str],
              timeout_s: float) -> list[str]:
    with tempfile.TemporaryFile() as tmp:
        with client.get_httpx_client().stream("GET", path, params=params, timeout=httpx.Timeout(timeout_s)) as response:
            if response.status_code >= 400:
                problem = _problem(response)
                raise DownloadError(problem.get("detail") or f"HTTP {response.status_code}",
                                    status=response.status_code, problem=problem)
            for chunk in response.iter_bytes(CHUNK):
                tmp.write(chunk)
        tmp.seek(0)
        return extract_tar(tmp, directory)


def download_model(client: AuthenticatedClient, model_id: str, directory: str | os.PathLike[str], *,
                   merged: bool = False, timeout_s: float = 60.0) -> list[str]:
    """Download model `model_id` into `directory` as a Hugging Face directory (a `lora` model: its
    adapter, or with `merged=True` its merged full weights). Returns the files written."""
    params = {"merged": "true"} if merged else {}
    return _download(client, f"/v1/models/{model_id}/content", params, directory, timeout_s)


def download_checkpoint(client: AuthenticatedClient, checkpoint_id: str, directory: str | os.PathLike[str], *,
                        role: str = "actor", merged: bool = False, include_training_state: bool = False,
                        timeout_s: float = 60.0) -> list[str]:
    """Download checkpoint `checkpoint_id` into `directory` as a Hugging Face directory (`role="critic"`:
    a PPO checkpoint's value model; `include_training_state`: the training state too, under
    `training_state/`). Returns the files written."""
    params: dict[str, Any] = {}
    if role != "actor":
        params["role"] = role
    if merged:
        params["merged"] = "true"
    if include_training_state:
        params["include"] = "training_state"
    return _download(client, f"/v1/checkpoints/{checkpoint_id}/content", params, directory, timeout_s)
