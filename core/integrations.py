"""Experiment-tracker integrations of a job (`integrations` on the job spec): what the API checks, and
the project secrets the workers hand to them. The trackers themselves (W&B, TensorBoard, MLflow)
are imported by the workers only (`workers.integrations`)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import secretbox
from core.addresses import UnsafeUrl, check_url
from core.config import settings
from core.models import ProjectSecret

SECRET_NAMES = {
    "wandb": ("WANDB_API_KEY", "WANDB_BASE_URL"),
    "mlflow": ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"),
}
"""The project secrets each integration reads (`PUT /v1/projects/current/secrets/{name}`)."""
URL_SECRETS = frozenset({"WANDB_BASE_URL"})
"""Secrets a worker connects to: checked as every tenant URL is (`core.addresses`), when set and at connect time."""


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


def check_secret(name: str, value: str) -> None:
    """A project secret's value, as far as Keel reads it; ValueError says why it may not be used."""
    if name in URL_SECRETS:
        try:
            check_url(value)
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
