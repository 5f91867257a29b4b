"""A job row becomes an engine request: references resolved to local paths, config built, resume set."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import add_file, add_job

from core.config import settings
from core.db import session_scope
from core.ids import new_id
from core.models import Checkpoint, Job, Model
from core.storage import get_storage
from engine.config import Resources, SFTConfig
from engine.errors import ConfigError, EngineError, ModelNotAllowed
from workers.resolve import job_dirs, latest_complete_checkpoint, resolve_model, resolve_request


@pytest.fixture
def model_dir() -> Path:
    path = Path(settings.model_roots[0]) / f"base-{new_id('m')}"
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path


def _resolve(job_id: str):
    with session_scope() as db:
        return resolve_request(db, db.get(Job, job_id))


def _checkpoint_dir(root: str, step: int, complete: bool = True) -> str:
    path = Path(root) / f"step_{step}"
    path.mkdir(parents=True)
    if complete:
        (path / "COMPLETE").write_text("")
    return str(path)


def _model_row(project_id: str, path: str, kind: str = "policy") -> str:
    model_id = new_id("model")
    with session_scope() as db:
        db.add(Model(id=model_id, project_id=project_id, name="m", kind=kind, format="hf", base_model="x", path=path))
    return model_id


def test_request_from_a_job_row(project_id, model_dir):
    train, val = add_file(project_id), add_file(project_id)
    job_id = add_job(project_id, train, model=str(model_dir), hyperparameters={"trainer": {"total_training_steps": 4}},
                     resources={"num_workers": 2, "cpus_per_worker": 0.5, "gpus_per_worker": 0.0, "colocate": True},
                     validation_file_id=val, seed=7)
    req = _resolve(job_id)
    storage = get_storage()
    assert req.job_id == job_id and req.method == "sft" and req.seed == 7
    assert isinstance(req.config, SFTConfig) and req.config.trainer.total_training_steps == 4
    assert req.model_path == str(model_dir.resolve())
    assert req.training_file == str(storage.local_path(f"files/{train}"))
    assert req.validation_file == str(storage.local_path(f"files/{val}"))
    assert (req.output_dir, req.checkpoint_dir) == job_dirs(job_id)
    assert req.output_dir.endswith(f"jobs/{job_id}/output")
    assert req.resources == Resources(num_workers=2, cpus_per_worker=0.5)
    assert req.resume_from is None
    assert req.allowed_model_roots[:-1] == tuple(settings.model_roots)
    assert req.allowed_model_roots[-1] == str(storage.local_path("jobs").resolve())
    assert req.ray_address is None


def test_model_references(project_id, model_dir, tmp_path):
    roots = tuple(settings.model_roots)
    with session_scope() as db:
        assert resolve_model(db, project_id, str(model_dir), roots, "model") == str(model_dir.resolve())
        assert resolve_model(db, project_id, "Qwen/Qwen2.5-0.5B", roots, "model") == "Qwen/Qwen2.5-0.5B"
        with pytest.raises(ModelNotAllowed):
            resolve_model(db, project_id, str(tmp_path), roots, "model")  # not under a root
        with pytest.raises(ModelNotAllowed):
            resolve_model(db, project_id, f"{model_dir}/../../../etc", roots, "model")
        with pytest.raises(ModelNotAllowed):
            resolve_model(db, project_id, str(model_dir / "missing"), roots, "model")
        with pytest.raises(EngineError) as err:
            resolve_model(db, project_id, "model-doesnotexist", roots, "method.teacher")
        assert (err.value.code, err.value.user_error, err.value.param) == ("invalid_reference", True, "method.teacher")
    output = _model_row(project_id, "/keel/jobs/job-1/output")
    with session_scope() as db:
        assert resolve_model(db, project_id, output, roots, "model") == "/keel/jobs/job-1/output"


def test_teacher_and_reward_model(project_id, model_dir):
    rm = _model_row(project_id, str(model_dir), kind="reward_model")
    f = add_file(project_id, purpose="preference")
    job = add_job(project_id, f, model=str(model_dir), method="rm_distill")
    with session_scope() as db:
        row = db.get(Job, job)
        row.spec = {**row.spec, "method": {**row.spec["method"], "teacher": rm}}
    assert _resolve(job).teacher_path == str(model_dir)

    prompts = add_file(project_id, purpose="prompts")
    ppo_rm = add_job(project_id, prompts, model=str(model_dir), method="ppo")
    ppo_fn = add_job(project_id, prompts, model=str(model_dir), method="ppo")
    with session_scope() as db:
        for job_id, reward in ((ppo_rm, {"model": rm, "function": None, "options": {}}),
                               (ppo_fn, {"model": None, "function": "gsm8k", "options": {"strict": True}})):
            row = db.get(Job, job_id)
            row.spec = {**row.spec, "method": {**row.spec["method"], "reward": reward}}
    assert _resolve(ppo_rm).reward == {"model_path": str(model_dir)}
    assert _resolve(ppo_fn).reward == {"function": "gsm8k", "options": {"strict": True}}


def test_a_grader_reward_gets_the_deployments_python_limits_and_its_score_models(project_id, model_dir,
                                                                                monkeypatch):
    import json

    rm = _model_row(project_id, str(model_dir), kind="reward_model")
    grader = {"type": "multi", "name": "m", "calculate_output": "a + b", "graders": {
        "a": {"type": "score_model", "name": "a", "model": rm, "input": [{"role": "user", "content": "x"}]},
        "b": {"type": "python", "name": "b", "source": "def grade(s, i):\n    return 1\n"}}}
    job = add_job(project_id, add_file(project_id, purpose="prompts"), model=str(model_dir), method="ppo")
    with session_scope() as db:
        row = db.get(Job, job)
        row.spec = {**row.spec, "method": {**row.spec["method"], "reward": {
            "model": None, "function": "grader", "options": {"grader": json.dumps(grader)}}}}
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", True)
    monkeypatch.setattr(settings, "PYTHON_GRADER_CPU_S", 3.0)
    monkeypatch.setattr(settings, "PYTHON_GRADER_TIMEOUT_S", 7.0)
    monkeypatch.setattr(settings, "PYTHON_GRADER_MEMORY_MB", 512)
    grading = _resolve(job).reward["grading"]
    assert grading == {"python": {"cpu_s": 3.0, "wall_s": 7.0, "memory_mb": 512, "disk_mb": 128},
                       "models": {rm: str(model_dir)}}
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", False)  # turned off since the job was queued
    assert _resolve(job).reward["grading"]["python"] is None  # the engine then fails the job
    with session_scope() as db:
        db.delete(db.get(Model, rm))
    with pytest.raises(EngineError) as err:
        _resolve(job)
    assert err.value.param == "method.reward.options.grader.graders.a.model"


def test_bad_hyperparameters_and_missing_files_are_user_errors(project_id, model_dir):
    f = add_file(project_id)
    with pytest.raises(ConfigError) as err:
        _resolve(add_job(project_id, f, model=str(model_dir), hyperparameters={"optim": {"lr": -1.0}}))
    assert err.value.param == "optim.lr"
    job = add_job(project_id, f, model=str(model_dir))
    get_storage().delete(f"files/{f}")
    with pytest.raises(EngineError) as err:
        _resolve(job)
    assert (err.value.code, err.value.param) == ("invalid_reference", "training_file")


def test_resume_from_own_latest_checkpoint_else_from_checkpoint(project_id, model_dir):
    f = add_file(project_id)
    source = add_job(project_id, f, model=str(model_dir), status="succeeded")
    source_ckpt = _checkpoint_dir(job_dirs(source)[1], 6)
    ckpt_id = new_id("ckpt")
    with session_scope() as db:
        db.add(Checkpoint(id=ckpt_id, job_id=source, project_id=project_id, step=6, path=source_ckpt))
    job = add_job(project_id, f, model=str(model_dir), from_checkpoint=ckpt_id)
    assert _resolve(job).resume_from == source_ckpt

    # Re-queued after a lost worker: its own newest complete checkpoint wins.
    own = job_dirs(job)[1]
    _checkpoint_dir(own, 2)
    step_10 = _checkpoint_dir(own, 10)
    _checkpoint_dir(own, 12, complete=False)  # died while writing it
    assert latest_complete_checkpoint(own) == step_10
    assert _resolve(job).resume_from == step_10


def test_from_checkpoint_whose_files_are_gone(project_id, model_dir):
    f = add_file(project_id)
    ckpt_id = new_id("ckpt")
    source = add_job(project_id, f, model=str(model_dir), status="succeeded")
    with session_scope() as db:
        db.add(Checkpoint(id=ckpt_id, job_id=source, project_id=project_id, step=1, path="/nowhere/step_1"))
    with pytest.raises(EngineError) as err:
        _resolve(add_job(project_id, f, model=str(model_dir), from_checkpoint=ckpt_id))
    assert (err.value.code, err.value.param) == ("invalid_reference", "from_checkpoint")
