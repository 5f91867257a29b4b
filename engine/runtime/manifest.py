"""What a job runs with, as seen on the node that runs it: the node's part of the job's manifest.

`collect(request)` returns package versions, the resolved config (the hyperparameters as the method
runs them), seeds, a fingerprint of the base model, the hardware and the image digest. The service
adds what only it knows (dataset hashes, references by id, the fork's parent) and stores the whole
(`workers.manifest`). Nothing here names a path: files and models are named by the service, by id.

The model fingerprint (`model_fingerprint`) is cheap and stable, not a full content hash: every file
of the model directory up to `WHOLE_BYTES` is hashed whole; a larger one by its size, its first and
last MiB and `SAMPLES` slices spread over it (a weights file changed anywhere in its header or in
most of its tensors changes the fingerprint). It is cached per directory by the files' sizes and
modification times, in this process and on disk (`<artifact cache>/model-fingerprints`), so a model
is read once per node.

No torch or Ray import at module level: `engine.runtime.jobs` imports this module (the local executor runs
without Ray: Ray is only read when the process already joined it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import tempfile
from typing import Any

from engine.config import JobRequest, config_to_dict
from engine.runtime.artifacts import is_remote
from engine.runtime.cluster import running_ray

log = logging.getLogger(__name__)

PACKAGES = {"keel": "keel-rlhf", "torch": "torch", "transformers": "transformers", "peft": "peft",
            "vllm": "vllm", "ray": "ray"}
"""Manifest name -> distribution name."""
IMAGE_DIGEST_ENV = "KEEL_IMAGE_DIGEST"
"""Set by the deployment's image (the node's environment): recorded as `image_digest`."""
FINGERPRINT = "sampled-sha256-v1"
WHOLE_BYTES = 64 * 1024 * 1024
HEAD_BYTES = 1024 * 1024
SAMPLES = 16
SAMPLE_BYTES = 64 * 1024
_MAX_DEPTH = 2
"""Directory levels read: the model directory and its sub-directories (LoRA's `adapter/`)."""
_fingerprints: dict[str, tuple[Any, str]] = {}


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages that decide a run's numbers (None: not installed)."""
    out: dict[str, str | None] = {}
    for name, dist in PACKAGES.items():
        try:
            out[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def seeds(request: JobRequest, config: dict[str, Any]) -> dict[str, int]:
    """The job's seed and every seed the config sets (`section.key` names)."""
    found = {"seed": request.seed}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{prefix}{key}.")
        elif "seed" in prefix.rsplit(".", 2)[-2] and isinstance(value, int) and not isinstance(value, bool):
            found[prefix[:-1]] = value

    walk(config, "")
    return found


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _gpus() -> list[dict[str, Any]]:
    """The GPUs this process sees (the controller of a method that trains in it holds its GPU)."""
    import torch  # the method imports it next anyway

    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        out.append({"name": props.name, "memory_bytes": int(props.total_memory)})
    return out


def _ray() -> dict[str, Any] | None:
    """The Ray cluster the job runs on (None: the local executor, without Ray)."""
    ray = running_ray()
    if ray is None:
        return None
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    kinds = sorted({k.split(":", 1)[1] for n in nodes for k in n.get("Resources", {}) if k.startswith("accelerator_type:")})
    total = ray.cluster_resources()
    return {"nodes": len(nodes), "cpus": float(total.get("CPU", 0.0)), "gpus": float(total.get("GPU", 0.0)),
            "accelerator_types": kinds}


def hardware() -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    ray = _ray()
    return {"cpu_model": _cpu_model(), "cpu_count": os.cpu_count(), "cpus_usable": usable,
            "memory_bytes": _memory_bytes(), "gpus": _gpus(), "ray_nodes": None if ray is None else ray["nodes"],
            "ray": ray, "platform": platform.platform(terse=True), "python": platform.python_version()}


def _model_files(root: str) -> list[tuple[str, str]]:
    """(relative name, path) of the regular files under `root`, hidden ones and deep ones left out."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        depth = 0 if dirpath == root else os.path.relpath(dirpath, root).count(os.sep) + 1
        dirnames[:] = [d for d in dirnames if not d.startswith(".")] if depth + 1 < _MAX_DEPTH else []
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not name.startswith(".") and os.path.isfile(path):
                out.append((os.path.relpath(path, root), path))
    return sorted(out)


def _file_digest(path: str, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= WHOLE_BYTES:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
            return h.hexdigest()
        offsets = [0, size - HEAD_BYTES] + [HEAD_BYTES + i * (size - 2 * HEAD_BYTES - SAMPLE_BYTES) // (SAMPLES - 1)
                                           for i in range(SAMPLES)]
        for offset in offsets:
            f.seek(offset)
            h.update(f.read(HEAD_BYTES if offset in (0, size - HEAD_BYTES) else SAMPLE_BYTES))
    return h.hexdigest()


def model_fingerprint(path: str, cache_dir: str | None = None) -> str | None:
    """The fingerprint of the model directory `path` (see the module docstring); None when `path` is
    not a local directory (a hub id, a remote store's URL)."""
    if is_remote(path) or not os.path.isdir(path):
        return None
    files = _model_files(path)
    signature = [(rel, st.st_size, st.st_mtime_ns) for rel, p in files for st in [os.stat(p)]]
    key = os.path.realpath(path)
    cached = _fingerprints.get(key)
    if cached is not None and cached[0] == signature:
        return cached[1]
    store = os.path.join(cache_dir or os.path.join(tempfile.gettempdir(), "keel-artifacts"), "model-fingerprints",
                         hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")
    try:
        with open(store) as f:
            saved = json.load(f)
        if saved.get("algorithm") == FINGERPRINT and [tuple(s) for s in saved["signature"]] == signature:
            _fingerprints[key] = (signature, saved["sha256"])
            return saved["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    total = hashlib.sha256()
    for (rel, file), (_, size, _) in zip(files, signature, strict=True):
        total.update(f"{rel}\0{size}\0{_file_digest(file, size)}\n".encode())
    digest = total.hexdigest()
    _fingerprints[key] = (signature, digest)
    try:
        os.makedirs(os.path.dirname(store), exist_ok=True)
        tmp = f"{store}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"algorithm": FINGERPRINT, "signature": signature, "sha256": digest}, f)
        os.replace(tmp, store)
    except OSError as exc:  # a read-only cache only costs the next run a re-read
        log.debug("model fingerprint cache not written: %s", exc)
    return digest


def collect(request: JobRequest) -> dict[str, Any]:
    """This node's part of the job's manifest (see the module docstring)."""
    config = config_to_dict(request.config)
    return {
        "method": request.method,
        "packages": package_versions(),
        "config": config,
        "resources": dataclasses.asdict(request.resources),
        "seeds": seeds(request, config),
        "base_model": {"sha256": model_fingerprint(request.model_path, request.artifact_cache_dir),
                       "algorithm": FINGERPRINT},
        "hardware": hardware(),
        "image_digest": os.environ.get(IMAGE_DIGEST_ENV) or None,
    }


def record(request: JobRequest, reporter: Any) -> None:
    """Hand `collect(request)` to the reporter's `manifest`, when it has one. Never fails the run: a
    manifest that cannot be collected is logged and left out."""
    manifest = getattr(reporter, "manifest", None)
    if manifest is None:
        return
    try:
        manifest(collect(request))
    except Exception as exc:  # noqa: BLE001 - reproducibility metadata must never cost the run
        log.warning("job %s: manifest not recorded: %s", request.job_id, exc)
