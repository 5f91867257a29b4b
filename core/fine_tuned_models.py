"""OpenAI's names of the models that fine-tuning jobs (`/v1/fine_tuning/jobs`) trained:
`ft:<base>:<project>:<suffix>:<id>`. The job object's `fine_tuned_model`; accepted wherever a model is
referenced (beside the Keel model id) and listed by `GET /v1/models` (docs/openai.md).

- `base`: the name of the base model the chain of fine-tunes started from: the last part of its
  directory or hub id (a Keel model or checkpoint used as the base is followed back to that root);
- `project`: the project's name;
- `suffix`: the job's `suffix`, empty without one;
- `id`: the Keel model id without its `model-` prefix: what the name resolves by.

A `:` inside a part becomes `-`, so a name always has five parts. Only the last one finds the model;
the others must match it (a name with a wrong base, project or suffix is unknown).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from core.models import Checkpoint, Job, Model, Project

PREFIX = "ft:"
_MODEL = "model-"
_MAX_CHAIN = 32
"""Fine-tunes of fine-tunes followed back to the root base (a guard, not a limit anyone reaches)."""


def _part(text: str) -> str:
    return text.replace(":", "-")


def base_name(db: Session, ref: str) -> str:
    """The root base's name of a model reference (a Keel model/checkpoint id, directory or hub id)."""
    for _ in range(_MAX_CHAIN):
        if ref.startswith(_MODEL):
            model = db.get(Model, ref)
            if model is None:
                break
            ref = model.base_model
        elif ref.startswith("ckpt-"):
            checkpoint = db.get(Checkpoint, ref)
            job = db.get(Job, checkpoint.job_id) if checkpoint is not None else None
            if job is None:
                break
            ref = job.model
        else:
            break
    return _part(ref.rstrip("/").rsplit("/", 1)[-1] or ref)


def openai_name(db: Session, job: Job) -> str | None:
    """The OpenAI name of the model `job` trained; None unless it is a fine-tuning job's that succeeded."""
    spec = job.spec or {}
    if job.output_model_id is None or "openai" not in spec:
        return None
    project = db.get(Project, job.project_id)
    parts = ("ft", base_name(db, job.model), _part(project.name if project else job.project_id),
             spec.get("suffix") or "", job.output_model_id.removeprefix(_MODEL))
    return ":".join(parts)


def resolve(db: Session, project_id: str, name: str) -> Model | None:
    """The project's model of that OpenAI name, or None."""
    parts = name.split(":")
    if len(parts) != 5 or parts[0] != "ft" or not parts[4]:
        return None
    model = db.get(Model, _MODEL + parts[4])
    if model is None or model.project_id != project_id or model.job_id is None:
        return None
    job = db.get(Job, model.job_id)
    return model if job is not None and openai_name(db, job) == name else None
