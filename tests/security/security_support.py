"""Shared by tests/security and tests/fuzz: the API tests' helpers (loaded by path, as tests/ has no
packages), every route the app serves, and a project holding one of each resource."""

from __future__ import annotations

import importlib.util
import os
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

from sqlalchemy import update

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/docs", "/redoc", "/openapi.json", "/metrics",
                          "/", "/console/{asset:path}"})  # the web console: static files, it asks for a key
"""The routes that answer without a key (`/metrics` takes KEEL_METRICS_TOKEN instead, when set); the
docs' static assets (a mount) are public too."""

DOCS_ASSETS_PREFIX = "/docs-assets"
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@cache
def load(relpath: str) -> ModuleType:
    """A module of this repository's tests by path (e.g. `tests/api/file_uploads.py`), under a private name."""
    name = "keel_support_" + relpath.removesuffix(".py").replace("/", "_")
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def api_files() -> ModuleType:
    """tests/api/file_uploads.py: parquet_bytes, jsonl_bytes, upload, assert_problem, project_blobs."""
    return load("tests/api/file_uploads.py")


def api_jobs() -> ModuleType:
    """tests/api/job_requests.py: make_file, make_model, rm_body, ppo_body, create."""
    return load("tests/api/job_requests.py")


# --- routes ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RouteInfo:
    method: str
    path: str
    in_schema: bool
    admin: bool = False
    """For admin keys only (`api.deps.AdminCaller`): a project key gets 403 (their own tests cover them)."""


def _needs_admin(dependant) -> bool:
    from api.deps import get_admin

    return dependant is not None and (dependant.call is get_admin or any(_needs_admin(d) for d in dependant.dependencies))


def iter_routes(app) -> Iterator[RouteInfo]:
    """Every (method, path) the app routes, walking included routers (FastAPI >= 0.16x keeps them
    nested) as well as flat route lists; mounts (static files) are reported with method `*`."""
    def walk(routes) -> Iterator[RouteInfo]:
        for route in routes:
            if hasattr(route, "effective_candidates"):  # fastapi.routing._IncludedRouter
                yield from walk(route.effective_candidates())
                continue
            path = getattr(route, "path", None)
            methods = getattr(route, "methods", None)
            if path is None:
                continue
            if methods is None:  # a Mount
                yield RouteInfo("*", path, False)
                continue
            in_schema = bool(getattr(route, "include_in_schema", True))
            admin = _needs_admin(getattr(route, "dependant", None))
            for method in sorted(methods):
                yield RouteInfo(method, path, in_schema, admin)

    seen: set[tuple[str, str]] = set()
    for info in walk(app.router.routes):
        if (info.method, info.path) not in seen:
            seen.add((info.method, info.path))
            yield info


def is_public(info: RouteInfo) -> bool:
    return info.path in PUBLIC_PATHS or info.path == DOCS_ASSETS_PREFIX or info.path.startswith(
        DOCS_ASSETS_PREFIX + "/")


def path_params(path: str) -> list[str]:
    return [part[1:-1].split(":")[0] for part in path.split("/") if part.startswith("{") and part.endswith("}")]


# --- projects and resources --------------------------------------------------------------------------

def new_project_key(prefix: str) -> tuple[str, str]:
    """(project_id, api_key) of a fresh project."""
    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project

    with session_scope() as db:
        project, _ = get_or_create_project(db, f"{prefix}-{secrets.token_hex(4)}")
        return project.id, create_api_key(db, project)


@dataclass
class World:
    """A project with one of each resource; `ids` maps a path parameter name to a real id."""

    project_id: str
    key: str
    file_id: str
    spare_file_id: str
    job_id: str
    queued_job_id: str
    checkpoint_id: str
    model_id: str
    webhook_id: str = ""
    trainer_id: str = ""
    """A trainer with one (failed) operation, deleted: its event stream ends at once."""
    operation_id: str = ""

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def ids(self) -> dict[str, str]:
        return {"file_id": self.file_id, "job_id": self.job_id, "checkpoint_id": self.checkpoint_id,
                "model_id": self.model_id, "webhook_id": self.webhook_id, "trainer_id": self.trainer_id,
                "operation_id": self.operation_id}


def build_world(client, keel_home: Path, monkeypatch, prefix: str = "world") -> World:
    """Upload two files, create two jobs over HTTP (nothing is dispatched), finish one of them with
    a full event log (status, metrics, checkpoint, done), and add its checkpoint and output model."""
    from core import events
    from core.db import session_scope
    from core.models import Checkpoint, Job, Model, utcnow
    from workers import dispatch

    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: True)
    monkeypatch.setattr(dispatch, "request_cancel", lambda job_id: False)
    monkeypatch.setattr(dispatch, "enqueue_trainer", lambda trainer_id, **_: True)
    files, jobs = api_files(), api_jobs()
    project_id, key = new_project_key(prefix)
    auth = {"Authorization": f"Bearer {key}"}
    rows = [dict(r, prompt=f"{prefix} {r['prompt']}") for r in files.PREFERENCE]
    r = files.upload(client, auth, files.parquet_bytes(rows), filename="prefs.parquet")
    assert r.status_code == 201, r.text
    file_id = r.json()["id"]
    r = files.upload(client, auth, files.jsonl_bytes(rows[:3]), filename="spare.jsonl")
    assert r.status_code == 201, r.text
    spare_file_id = r.json()["id"]
    body = jobs.rm_body({"preference": file_id})
    job_id = jobs.create(client, auth, body).json()["id"]
    queued_job_id = jobs.create(client, auth, {**body, "seed": 1}).json()["id"]

    ckpt_dir = keel_home / "artifacts" / "jobs" / job_id / "checkpoints" / "step_1"
    ckpt_dir.mkdir(parents=True)
    (ckpt_dir / "COMPLETE").write_text("")
    (ckpt_dir / "model.safetensors").write_bytes(os.urandom(4096))
    (ckpt_dir / "hf").mkdir()  # the Hugging Face export the download route serves
    (ckpt_dir / "hf" / "config.json").write_text("{}")
    (ckpt_dir / "hf" / "model.safetensors").write_bytes(os.urandom(4096))
    with session_scope() as db:
        ckpt = Checkpoint(job_id=job_id, project_id=project_id, step=1, path=str(ckpt_dir),
                          metrics={"val/loss": 0.5}, bytes=4096)
        model = Model(project_id=project_id, job_id=job_id, name=f"{prefix}-rm", kind="reward_model",
                      format="hf", base_model="org/name", path=str(ckpt_dir))
        db.add_all([ckpt, model])
        db.flush()
        checkpoint_id, model_id = ckpt.id, model.id
        db.execute(update(Job).where(Job.id == job_id).values(
            status="succeeded", started_at=utcnow(), finished_at=utcnow(), output_model_id=model_id,
            progress={"step": 1, "total_steps": 1}, latest_metrics={"train/loss": 0.5},
            manifest={"recorded_at": 0, "method": "reward_model", "packages": {}, "config": {}, "resources": {},
                      "seeds": {"seed": 0}, "datasets": {}, "base_model": {"ref": "org/name"}, "hardware": {}}))
        events.append_event(db, job_id, "job.status", {"status": "running"}, commit=False)
        events.append_event(db, job_id, "job.metrics", {"step": 1, "total_steps": 1,
                                                         "values": {"train/loss": 0.5}}, commit=False)
        events.append_event(db, job_id, "job.checkpoint", {"checkpoint_id": checkpoint_id, "step": 1,
                                                            "metrics": {"val/loss": 0.5}}, commit=False)
        events.append_event(db, job_id, "job.status", {"status": "succeeded"}, commit=False)
        events.append_event(db, job_id, "job.done", {"status": "succeeded"}, commit=False)
    tensorboard = keel_home / "artifacts" / "jobs" / job_id / "tensorboard"  # its `tensorboard` integration's logs
    tensorboard.mkdir(parents=True)
    (tensorboard / "events.out.tfevents.1.world").write_bytes(os.urandom(64))
    # After the events: the webhook (to a closed loopback port) has nothing to send.
    r = client.post("/v1/webhooks", headers=auth, json={"url": "http://127.0.0.1:9/hook"})
    assert r.status_code == 201, r.text
    webhook_id = r.json()["id"]
    r = client.post("/v1/trainers", headers=auth, json={"model": "org/name", "metadata": {"world": prefix}})
    assert r.status_code == 201, r.text
    trainer_id = r.json()["id"]
    r = client.post(f"/v1/trainers/{trainer_id}/optim_step", headers=auth, json={})
    assert r.status_code == 202, r.text
    operation_id = r.json()["id"]
    assert client.delete(f"/v1/trainers/{trainer_id}", headers=auth).status_code == 200
    return World(project_id, key, file_id, spare_file_id, job_id, queued_job_id, checkpoint_id, model_id,
                 webhook_id=webhook_id, trainer_id=trainer_id, operation_id=operation_id)


def retire_jobs(project_id: str) -> None:
    """Cancel whatever a test left queued in `project_id`, so no worker of a later test picks it up."""
    from core.db import session_scope
    from core.models import Job, utcnow

    with session_scope() as db:
        db.execute(update(Job).where(Job.project_id == project_id,
                                     Job.status.in_(("queued", "running", "cancelling")))
                   .values(status="cancelled", finished_at=utcnow()))
