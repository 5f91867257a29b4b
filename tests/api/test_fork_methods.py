"""Forking jobs of every method whose request carries more than hyperparameters (a PPO job's reward):
the fork validates the parent's whole method, merged with the overrides (tests/workers/test_forks.py
runs SFT forks end to end)."""

from __future__ import annotations

from core.models import Checkpoint
from core.storage import COMPLETE_MARKER, get_storage
from tests.api.job_requests import create, ppo_body


def _checkpoint(db, job: dict, project_id: str, tmp_path) -> str:
    """A complete checkpoint of `job` at step 1 (its files: only the completion marker)."""
    path = tmp_path / "ckpt"
    path.mkdir()
    (path / COMPLETE_MARKER).write_text("")
    ckpt = Checkpoint(job_id=job["id"], project_id=project_id, step=1, path=str(path))
    db.add(ckpt)
    db.commit()
    assert get_storage().is_complete(ckpt.path)
    return ckpt.id


def test_a_ppo_job_forks_with_its_reward_and_the_overrides(client, auth, project_key, files, db, tmp_path,
                                                           dispatched):
    parent = create(client, auth, ppo_body(files, actor={"optim": {"lr": 1e-6}})).json()
    ckpt = _checkpoint(db, parent, project_key[0], tmp_path)
    r = client.post(f"/v1/jobs/{parent['id']}/fork", headers=auth,
                    json={"checkpoint": ckpt, "hyperparameters": {"actor": {"optim": {"lr": 2e-6}}}})
    assert r.status_code == 201, r.text
    fork = r.json()
    assert fork["method"]["reward"] == parent["method"]["reward"]
    assert fork["method"]["hyperparameters"]["actor"]["optim"]["lr"] == 2e-6
    assert fork["forked_from"]["checkpoint"] == ckpt
