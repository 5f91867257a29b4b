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
                          "/", "/console/{asset:path}",  # the web console: static files, it asks for a key
                          "/api/v1/healthz"})  # the Tinker room's probe
"""The routes that answer without a key (`/metrics` takes KEEL_METRICS_TOKEN instead, when set); the
docs' static assets (a mount) are public too."""
SIGNED_PATHS = frozenset({"/api/v1/external_weights/{model_id}/{file:path}"})
"""Routes that take no key because a signed link is the permission (the Tinker room's checkpoint
downloads, `api.tinker.runs`): tests/security/test_tinker_tenancy.py checks the signature instead."""

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


def is_signed(info: RouteInfo) -> bool:
    return info.path in SIGNED_PATHS


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
    tinker_session_id: str = ""
    """A Tinker session (open), with one training client (`run_id`) and one sampling session."""
    run_id: str = ""
    """The training client's Tinker model id: a training run, a trainer that never ran."""
    sampler_id: str = ""
    tinker_checkpoint: str = ""
    """`<segment>/<name>` of the run's one checkpoint (a sampler save, files on disk)."""
    tinker_model_id: str = ""
    """The Keel model that checkpoint is."""
    trajectory_id: str = ""
    """A recorded inference call under a trajectory id, scored (`/v1/trajectories`)."""

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def tinker_headers(self) -> dict[str, str]:
        """The key as the Tinker client sends it."""
        return tinker_headers(self.headers)

    @property
    def ids(self) -> dict[str, str]:
        return {"file_id": self.file_id, "job_id": self.job_id, "checkpoint_id": self.checkpoint_id,
                "model_id": self.model_id, "webhook_id": self.webhook_id, "trainer_id": self.trainer_id,
                "operation_id": self.operation_id, "trajectory_id": self.trajectory_id}

    @property
    def tinker_ids(self) -> dict[str, str]:
        """The Tinker room's path parameters (`/api/v1/...`; its `checkpoint_id` is `<segment>/<name>`)."""
        return {"session_id": self.tinker_session_id, "run_id": self.run_id, "sampler_id": self.sampler_id,
                "checkpoint_id": self.tinker_checkpoint, "model_id": self.tinker_model_id}

    def ids_for(self, path: str) -> dict[str, str]:
        return self.tinker_ids if path.startswith("/api/v1/") else self.ids


def tinker_headers(auth: dict[str, str]) -> dict[str, str]:
    """Bearer headers of a key -> the same key in the Tinker client's form (`X-API-Key: tml-...`)."""
    return {"X-API-Key": "tml-" + auth["Authorization"].split()[1]}


def build_world(client, keel_home: Path, monkeypatch, prefix: str = "world") -> World:
    """Upload two files, create two jobs over HTTP (nothing is dispatched), finish one of them with
    a full event log (status, metrics, checkpoint, done), and add its checkpoint and output model."""
    from core import events, trajectories
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
    trajectory_id = f"{prefix}-trajectory"  # as the inference route records a call, without a model server
    with session_scope() as db:
        trajectories.record(db, project_id, trajectory_id, "org/name", [1, 2], [{"token_ids": [3], "logprobs": [-0.5]}])
    r = client.post(f"/v1/trajectories/{trajectory_id}/reward", headers=auth, json={"reward": 1.0})
    assert r.status_code == 200, r.text
    return World(project_id, key, file_id, spare_file_id, job_id, queued_job_id, checkpoint_id, model_id,
                 webhook_id=webhook_id, trainer_id=trainer_id, operation_id=operation_id, trajectory_id=trajectory_id,
                 **_tinker_world(client, tinker_headers(auth), prefix))


def _tinker_world(client, tinker: dict[str, str], prefix: str) -> dict[str, str]:
    """Through the Tinker room as its client calls it: a session, a training client on `org/name`, a
    sampling session on the same base model, and a sampler save of the training client, which the
    worker records (`workers.trainers.finish`) as if the engine had written these files."""
    from core import trainers
    from core.db import session_scope
    from core.models import Trainer, TrainerOperation
    from workers.trainers import finish

    r = client.post("/api/v1/create_session", headers=tinker, json={"tags": [prefix], "sdk_version": "0.38.0"})
    assert r.status_code == 200, r.text
    session_id = r.json()["session_id"]
    r = client.post("/api/v1/create_model", headers=tinker,
                    json={"session_id": session_id, "model_seq_id": 0, "base_model": "org/name"})
    assert r.status_code == 200, r.text
    run_id = r.json()["model_id"]
    r = client.post("/api/v1/create_sampling_session", headers=tinker,
                    json={"session_id": session_id, "sampling_session_seq_id": 0, "base_model": "org/name"})
    assert r.status_code == 200, r.text
    sampler_id = r.json()["sampling_session_id"]
    r = client.post("/api/v1/save_weights_for_sampler", headers=tinker,
                    json={"model_id": run_id, "path": prefix, "seq_id": 1})
    assert r.status_code == 200, r.text
    with session_scope() as db:
        op = db.get(TrainerOperation, r.json()["request_id"])
        trainer = db.get(Trainer, op.trainer_id)
        db.expunge_all()
    saved = Path(trainers.state_root(trainer.id)) / "sampler_weights" / prefix  # where the engine writes it
    saved.mkdir(parents=True)
    (saved / "config.json").write_text("{}")
    (saved / "model.safetensors").write_bytes(os.urandom(4096))
    finish(trainer, op, result={"path": str(saved), "format": "hf", "step": 0})
    with session_scope() as db:
        result = db.get(TrainerOperation, op.id).result
    return {"tinker_session_id": session_id, "run_id": run_id, "sampler_id": sampler_id,
            "tinker_checkpoint": f"sampler_weights/{prefix}", "tinker_model_id": result["model_id"]}


def retire_jobs(project_id: str) -> None:
    """Cancel whatever a test left queued in `project_id`, so no worker of a later test picks it up; its
    trainers (the Tinker world's hold no actor) are deleted and released."""
    from core import trainers
    from core.db import session_scope
    from core.models import Job, Trainer, utcnow

    with session_scope() as db:
        db.execute(update(Job).where(Job.project_id == project_id,
                                     Job.status.in_(("queued", "running", "cancelling")))
                   .values(status="cancelled", finished_at=utcnow()))
        db.execute(update(Trainer).where(Trainer.project_id == project_id, Trainer.status.not_in(trainers.ENDED))
                   .values(status="deleted", deleted_at=utcnow(), released_at=utcnow()))
