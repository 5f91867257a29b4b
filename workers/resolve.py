"""Turn a job row into the engine's `JobRequest`: every reference becomes a location the engine can
read from any Ray node: a path in a local artifact store (mounted on every node), or a URL of a
remote one (the engine stages and uploads those itself, `engine.runtime.artifacts`).

- model refs: a Keel model id -> that model's recorded location; a checkpoint id -> its Hugging Face
  export (`core.checkpoints`); an absolute directory -> itself,
  if it lies under a model root; anything else (a hub id) is passed through for the engine to load;
- file ids -> their locations in the artifact store;
- a `grader` reward -> `reward.grading`: the python-grader limits of the deployment (or None: disabled)
  and the locations of its score_model graders' models; a `code_tests` reward -> those limits;
- hyperparameters -> the method's frozen config (`engine.config.build_config`);
- outputs: `jobs/<job_id>/output` and `jobs/<job_id>/checkpoints` in the artifact store;
- `resume_from`: this job's newest checkpoint in its event log (a re-queued job continues where it
  stopped; `own_checkpoint`), else the checkpoint named by `from_checkpoint`.

Reference problems raise user errors (`EngineError` with `user_error`): the job fails with their code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import checkpoints, environments
from core.config import settings
from core.models import Checkpoint, File, Job, Model
from core.storage import COMPLETE_MARKER, get_storage, is_url
from engine.config import METHOD_CONFIGS, JobRequest, Resources, build_config
from engine.errors import ConfigError, EngineError, ModelNotAllowed
from engine.rewards.grader_spec import model_refs

_STEP_DIR = re.compile(r"^step_(\d+)$")


class MissingReference(EngineError):
    """A file, model or checkpoint the job names is gone or not usable."""

    code = "invalid_reference"
    user_error = True


def job_dirs(job_id: str) -> tuple[str, str]:
    """(output dir, checkpoint dir) of a job in the artifact store: paths, or URLs of a remote store."""
    storage = get_storage()
    return storage.location(f"jobs/{job_id}/output"), storage.location(f"jobs/{job_id}/checkpoints")


def allowed_model_roots() -> tuple[str, ...]:
    """The deployment's model roots plus Keel's own job outputs (when they are local directories;
    remote outputs are only ever named by model id)."""
    storage = get_storage()
    if not storage.is_local:
        return tuple(settings.model_roots)
    return (*settings.model_roots, str(Path(storage.local_path("jobs")).resolve()))


def resolve_request(db: Session, job: Job) -> JobRequest:
    spec: dict[str, Any] = job.spec or {}
    method_spec: dict[str, Any] = spec.get("method") or {}
    method = method_spec.get("type") or job.method
    if method not in METHOD_CONFIGS:
        raise ConfigError(f"unknown method {method!r}", param="method.type")
    config = build_config(METHOD_CONFIGS[method], method_spec.get("hyperparameters"))
    output_dir, checkpoint_dir = job_dirs(job.id)
    roots = allowed_model_roots()
    reward: dict[str, Any] = {}
    reward_spec = method_spec.get("reward") or {}
    if reward_spec and method in ("ppo", "eval", "distill_policy"):  # none: a PPO job on recorded trajectories
        if reward_spec.get("model"):
            reward = {"model_path": resolve_model(db, job.project_id, reward_spec["model"], roots,
                                                  "method.reward.model")}
        else:
            reward = {"function": reward_spec.get("function"), "options": dict(reward_spec.get("options") or {})}
            if reward["function"] == "grader":
                reward["grading"] = grading(db, job.project_id, reward["options"], roots)
            elif reward["function"] == "code_tests":  # the policy's code runs in the python graders' sandbox
                reward["grading"] = {"python": settings.python_grader_limits}
    teacher = method_spec.get("teacher")
    compare_to = method_spec.get("compare_to")
    return JobRequest(
        job_id=job.id,
        method=method,
        config=config,
        model_path=resolve_model(db, job.project_id, job.model or spec["model"], roots, "model"),
        training_file=file_path(db, job.project_id, job.training_file_id, "training_file"),
        validation_file=(file_path(db, job.project_id, job.validation_file_id, "validation_file")
                         if job.validation_file_id else None),
        output_dir=output_dir,
        checkpoint_dir=checkpoint_dir,
        seed=job.seed,
        resume_from=own_checkpoint(db, job, checkpoint_dir)
        or from_checkpoint(db, job.project_id, spec.get("from_checkpoint")),
        teacher_path=resolve_model(db, job.project_id, teacher, roots, "method.teacher") if teacher else None,
        reward=reward,
        environment=method_spec.get("environment") if method == "ppo" else None,
        compare_to_path=(resolve_model(db, job.project_id, compare_to, roots, "method.compare_to")
                         if compare_to else None),
        resources=resources(spec.get("resources")),
        allowed_model_roots=roots,
        ray_address=settings.RAY_ADDRESS or None,
        storage_options=dict(settings.STORAGE_OPTIONS),
        artifact_cache_dir=settings.ARTIFACT_CACHE_DIR or None,
        environment_allowed_hosts=environments.allowed_hosts(),
        environment_python=settings.python_grader_limits,
    )


def grading(db: Session, project_id: str, options: dict[str, Any], roots: tuple[str, ...]) -> dict[str, Any]:
    """What a `grader` reward needs besides its JSON: the deployment's python-grader limits (None when
    `KEEL_ALLOW_PYTHON_GRADERS` is off: the engine then fails a job with a python grader) and the
    location of each score_model grader's model."""
    try:
        spec = json.loads(options.get("grader") or "")
    except (TypeError, ValueError):
        spec = None  # the engine reports the bad grader
    models = {ref: resolve_model(db, project_id, ref, roots, param.replace("grader", "method.reward.options.grader", 1))
              for ref, param in model_refs(spec)}
    return {"python": settings.python_grader_limits, "models": models}


def resolve_model(db: Session, project_id: str, ref: str, roots: tuple[str, ...], param: str) -> str:
    """A Keel model id -> its recorded location; a checkpoint id -> its Hugging Face export (a PPO
    checkpoint's: the actor's); an absolute path -> itself if under `roots`; else a hub id."""
    if ref.startswith("model-"):
        model = db.get(Model, ref)
        if model is None or model.project_id != project_id:
            raise MissingReference(f"{param}: model {ref} no longer exists", param=param)
        return model.path
    if ref.startswith("ckpt-"):
        ckpt = db.get(Checkpoint, ref)
        if ckpt is None or ckpt.project_id != project_id:
            raise MissingReference(f"{param}: checkpoint {ref} no longer exists", param=param)
        export = checkpoints.export_location(get_storage(), ckpt.path) if _is_complete(ckpt.path) else None
        if export is None:
            raise MissingReference(f"{param}: checkpoint {ref} holds no Hugging Face export", param=param)
        return export
    if os.path.isabs(ref):
        path = Path(ref).resolve()
        if not any(path.is_relative_to(root) for root in roots):
            raise ModelNotAllowed(f"{param}: {ref!r} is not under an allowed model root", param=param)
        if not path.is_dir():
            raise ModelNotAllowed(f"{param}: no model directory at {ref!r}", param=param)
        return str(path)
    store = [os.path.dirname(r) for r in roots if os.path.basename(r) == "jobs"]
    if any(os.path.lexists(os.path.join(root, ref)) for root in (*roots, *store)):
        # The engine would load that directory (another project's `job-.../output`), not a hub model.
        raise ModelNotAllowed(f"{param}: {ref!r} names a local directory, not a hub id; name Keel's models "
                              "by id", param=param)
    return ref


def file_path(db: Session, project_id: str, file_id: str, param: str) -> str:
    file = db.get(File, file_id)
    if file is None or file.project_id != project_id or file.deleted_at is not None:
        raise MissingReference(f"{param}: file {file_id} no longer exists", param=param)
    storage = get_storage()
    if not storage.exists(file.storage_key):
        raise MissingReference(f"{param}: the bytes of file {file_id} are missing", param=param)
    return storage.location(file.storage_key)


def own_checkpoint(db: Session, job: Job, checkpoint_dir: str) -> str | None:
    """Where a re-queued job resumes: its newest checkpoint the event log recorded (a `Checkpoint` row)
    whose directory is complete; without one, its newest complete directory no later than the log's
    last step.

    A controller whose worker died keeps training until it notices the job was re-queued, and its
    reports are dropped from that moment, but not its checkpoint files. Resuming from a step whose
    metrics were dropped would leave that step out of the log for good (a gap); resuming from one whose
    checkpoint report was dropped would leave the checkpoint unlisted. Resuming from the newest one the
    log knows re-runs those steps instead, and they are reported then.
    """
    recorded = db.scalars(select(Checkpoint.path).where(Checkpoint.job_id == job.id)
                          .order_by(Checkpoint.step.desc())).all()
    for path in recorded:
        if _is_complete(path):
            return path
    return latest_complete_checkpoint(checkpoint_dir, max_step=logged_step(job))


def logged_step(job: Job) -> int | None:
    """The last training step in the job's event log (`progress.step`), None before the first."""
    step = (job.progress or {}).get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def latest_complete_checkpoint(root: str, max_step: int | None = None) -> str | None:
    """The newest `step_<N>` directory under `root` (a path or a URL) holding the completion marker
    (with N <= `max_step` when given), or None."""
    if is_url(root):
        candidates = [(int(m.group(1)), path) for name, path in get_storage().subdirs(root)
                      if (m := _STEP_DIR.match(name))]
    elif os.path.isdir(root):
        candidates = [(int(m.group(1)), entry.path) for entry in os.scandir(root)
                      if (m := _STEP_DIR.match(entry.name)) and entry.is_dir()]
    else:
        return None
    for step, path in sorted(candidates, reverse=True):  # newest first: usually one marker check
        if (max_step is None or step <= max_step) and _is_complete(path):
            return path
    return None


def _is_complete(path: str) -> bool:
    if is_url(path):
        return get_storage().is_complete(path)
    return os.path.isfile(os.path.join(path, COMPLETE_MARKER))


def from_checkpoint(db: Session, project_id: str, checkpoint_id: str | None) -> str | None:
    if not checkpoint_id:
        return None
    ckpt = db.get(Checkpoint, checkpoint_id)
    if ckpt is None or ckpt.project_id != project_id:
        raise MissingReference(f"from_checkpoint: checkpoint {checkpoint_id} no longer exists",
                              param="from_checkpoint")
    if not _is_complete(ckpt.path):
        raise MissingReference(f"from_checkpoint: the files of checkpoint {checkpoint_id} are missing",
                              param="from_checkpoint")
    return ckpt.path


def resources(data: dict[str, Any] | None) -> Resources:
    names = {f.name for f in dataclasses.fields(Resources)}
    return Resources(**{k: v for k, v in (data or {}).items() if k in names})
