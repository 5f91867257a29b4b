"""Checkpoint retention (`trainer.max_actor_ckpt_to_keep`, `max_critic_ckpt_to_keep`), enforced by the
reporter as each checkpoint is recorded: older rows and their files go, never the newest (what a
resume starts from) nor one a queued or running job uses."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from core.config import settings
from core.db import session_scope
from core.models import Checkpoint
from core.storage import get_storage
from tests.workers.factories import add_file, add_job
from workers.reporter import DBReporter


def _step(root: Path, step: int, roles: tuple[str, ...] = ()) -> str:
    path = root / f"step_{step}"
    for part in [path / r for r in roles] or [path]:
        (part / "hf").mkdir(parents=True)
        (part / "model.safetensors").write_bytes(b"w")
        (part / "COMPLETE").write_text("ok\n")
    (path / "COMPLETE").write_text("ok\n")
    return str(path)


def _rows(job_id: str) -> dict[int, str]:
    with session_scope() as db:
        return dict(db.execute(select(Checkpoint.step, Checkpoint.id).where(Checkpoint.job_id == job_id)).all())


def _job(project_id: str, method: str = "sft", **trainer) -> tuple[str, Path]:
    job_id = add_job(project_id, add_file(project_id), method=method, status="running",
                     hyperparameters={"trainer": trainer})
    return job_id, get_storage().local_path(f"jobs/{job_id}/checkpoints")


def test_keeps_the_newest_n_and_frees_the_rest(project_id):
    job_id, root = _job(project_id, max_actor_ckpt_to_keep=2)
    reporter = DBReporter(job_id, settings.database_url)
    for step in range(1, 5):
        reporter.checkpoint(step, _step(root, step), {})
    assert sorted(_rows(job_id)) == [3, 4]
    assert sorted(p.name for p in root.iterdir()) == ["step_3", "step_4"]


def test_without_a_limit_every_checkpoint_stays(project_id):
    job_id, root = _job(project_id)
    reporter = DBReporter(job_id, settings.database_url)
    for step in range(1, 4):
        reporter.checkpoint(step, _step(root, step), {})
    assert sorted(_rows(job_id)) == [1, 2, 3] and len(list(root.iterdir())) == 3


def test_a_checkpoint_in_use_is_kept(project_id):
    job_id, root = _job(project_id, max_actor_ckpt_to_keep=1)
    reporter = DBReporter(job_id, settings.database_url)
    reporter.checkpoint(1, _step(root, 1), {})
    first = _rows(job_id)[1]
    add_job(project_id, add_file(project_id), model=first, status="queued")  # a job will load it
    for step in (2, 3):
        reporter.checkpoint(step, _step(root, step), {})
    assert sorted(_rows(job_id)) == [1, 3]
    assert sorted(p.name for p in root.iterdir()) == ["step_1", "step_3"]


def test_critic_parts_have_their_own_limit(project_id):
    job_id, root = _job(project_id, "ppo", max_actor_ckpt_to_keep=3, max_critic_ckpt_to_keep=1)
    reporter = DBReporter(job_id, settings.database_url)
    for step in range(1, 5):
        reporter.checkpoint(step, _step(root, step, ("actor", "critic")), {})
    assert sorted(_rows(job_id)) == [2, 3, 4]
    assert [(s, (root / f"step_{s}" / "critic").exists()) for s in (2, 3, 4)] == [(2, False), (3, False), (4, True)]
    assert all((root / f"step_{s}" / "actor" / "hf").is_dir() for s in (2, 3, 4))
