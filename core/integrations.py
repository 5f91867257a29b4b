"""Experiment-tracker integrations of a job (`integrations` on the job spec): what the API checks, and
the project secrets the workers hand to them. The trackers themselves (W&B, TensorBoard, MLflow)
are imported by the workers only (`workers.integrations`)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import secretbox
from core.config import settings
from core.models import ProjectSecret
from core.webhooks import UnsafeUrl, check_url

SECRET_NAMES = {
    "wandb": ("WANDB_API_KEY", "WANDB_BASE_URL"),
    "mlflow": ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"),
}
"""The project secrets each integration reads (`PUT /v1/projects/current/secrets/{name}`)."""


def tensorboard_key(job_id: str) -> str:
    """Where a job's TensorBoard event files live in the artifact store."""
    return f"jobs/{job_id}/tensorboard"


def check_tracking_uri(uri: str) -> None:
    """An MLflow tracking URI a job may use: under one of the deployment's allowed prefixes, or http(s) to
    a public address. ValueError says why not. (A tenant must not make a worker write files or call
    internal hosts of its choosing.)"""
    if any(uri.startswith(prefix) for prefix in settings.MLFLOW_TRACKING_URI_PREFIXES):
        return
    if not uri.startswith(("http://", "https://")):
        raise ValueError("must be an http(s) URL, or start with one of the deployment's "
                         "KEEL_MLFLOW_TRACKING_URI_PREFIXES")
    try:
        check_url(uri)
    except UnsafeUrl as exc:
        raise ValueError(str(exc)) from exc


def project_secrets(db: Session, project_id: str, names: tuple[str, ...]) -> dict[str, str]:
    """The project's secrets among `names`, decrypted (those that cannot be are left out)."""
    rows = db.execute(select(ProjectSecret.name, ProjectSecret.value)
                      .where(ProjectSecret.project_id == project_id, ProjectSecret.name.in_(names))).all()
    out = {}
    for name, sealed in rows:
        try:
            out[name] = secretbox.open_sealed(sealed)
        except ValueError:
            continue
    return out
