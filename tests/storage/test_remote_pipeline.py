"""End to end on an S3 artifact store: uploads, SFT -> reward model -> distilled reward model -> PPO
through the real API, Celery worker and Ray, checkpoint download, and a job resumed from a checkpoint
it stages from S3, with no local artifact directory at all."""

from __future__ import annotations

import io
import json
import os
import secrets
import tarfile
from pathlib import Path

import pytest
from sqlalchemy import select

from keel_cli.demo import PIPELINE, PURPOSES, _resolve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3_db():
    """A migrated database of the stack's own: no other test's worker or sweeper sees its jobs."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from core import migrate
    from core.config import settings
    from core.db import get_engine

    url = make_url(settings.database_url)
    name = f"{url.database}_s3"
    admin = create_engine(os.environ.get("KEEL_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"),
                          isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    db_url = url.set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(db_url)
    yield db_url
    get_engine(db_url).dispose()
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": name})
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
    admin.dispose()


@pytest.fixture(scope="module")
def stack(s3_db, s3_endpoint, ray_cluster, keel_home):
    import s3fs
    from s3_stack import S3Stack

    bucket = f"keel-pipeline-{secrets.token_hex(4)}"
    s3fs.S3FileSystem(endpoint_url=s3_endpoint).mkdir(bucket)
    stack = S3Stack(home=keel_home / f"s3-stack-{secrets.token_hex(3)}", db_url=s3_db,
                    storage_url=f"s3://{bucket}/keel", endpoint=s3_endpoint, ray_address=ray_cluster)
    try:
        stack.start()
        yield stack
    finally:
        stack.close()


@pytest.fixture(scope="module")
def assets():
    from core.config import settings
    from engine.demo import build_demo_assets

    return build_demo_assets(Path(settings.model_roots[0]) / "s3-demo")


def _bucket_keys(stack) -> set[str]:
    import s3fs

    fs = s3fs.S3FileSystem(**stack.storage_options)
    root = stack.storage_url.removeprefix("s3://")
    fs.invalidate_cache()
    return {p[len(root) + 1:] for p in fs.find(root)}


@pytest.mark.timeout(1800)
def test_pipeline_and_resume_on_s3_with_no_local_artifacts(stack, assets):
    from core.db import session_scope
    from core.models import Checkpoint, Model

    files = {name: stack.upload(assets[name], purpose) for name, purpose in PURPOSES.items()}
    outputs: dict[str, str] = {}
    jobs: dict[str, dict] = {}
    for step in PIPELINE:
        job = stack.run({"model": _resolve(step["model"], assets, outputs), "training_file": files[step["train"]],
                         "validation_file": files.get(step.get("val")), "method": _resolve(step["method"], assets, outputs),
                         "suffix": step["name"]})
        assert job["status"] == "succeeded", (step["name"], job["error"])
        outputs[step["name"]], jobs[step["name"]] = job["output_model"], job
    assert jobs["reward_model"]["latest_metrics"]["val/rm/accuracy"] >= 0.9
    assert jobs["rm_distill"]["latest_metrics"]["distill/val_kl"] < 0.05

    # Everything went to the bucket, recorded by URL; nothing under the local artifact directory.
    assert not (stack.home / "artifacts").exists() or not any((stack.home / "artifacts").iterdir())
    keys = _bucket_keys(stack)
    ids = {name: job["id"] for name, job in jobs.items()}
    assert {f"jobs/{ids['sft']}/output/config.json", f"jobs/{ids['sft']}/checkpoints/step_10/COMPLETE",
            f"jobs/{ids['rm_distill']}/checkpoints/teacher_scores.parquet",
            f"jobs/{ids['ppo']}/checkpoints/step_3/COMPLETE", f"jobs/{ids['ppo']}/checkpoints/step_3/actor/COMPLETE",
            f"jobs/{ids['ppo']}/checkpoints/step_3/critic/model.safetensors",
            f"jobs/{ids['ppo']}/output/model.safetensors"} <= keys
    assert sum(k.startswith("files/") for k in keys) == len(files)
    with session_scope(stack.db_url) as db:
        model_paths = db.scalars(select(Model.path)).all()
        checkpoints = db.execute(select(Checkpoint.path, Checkpoint.bytes)).all()
    assert len(model_paths) == 4 and all(p.startswith(f"{stack.storage_url}/jobs/") for p in model_paths)
    assert checkpoints and all(p.startswith(stack.storage_url) and size > 0 for p, size in checkpoints)

    # A PPO checkpoint downloads as a tar streamed from the bucket.
    ppo_ckpts = stack.request("GET", f"/v1/jobs/{ids['ppo']}/checkpoints").json()["data"]
    step3 = next(c for c in ppo_ckpts if c["step"] == 3)
    r = stack.request("GET", f"/v1/checkpoints/{step3['id']}/content?include=training_state")
    assert r.status_code == 200
    root = f"{step3['id']}-training-state"
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        names = set(tar.getnames())
        extra = json.load(tar.extractfile(f"{root}/training_state/actor/extra.json"))
    assert {f"{root}/config.json", f"{root}/model.safetensors", f"{root}/training_state/COMPLETE",
            f"{root}/training_state/actor/model.safetensors", f"{root}/training_state/critic/model.safetensors"} <= names
    assert extra["trainer"]["step"] == 3

    # A new SFT job from the SFT job's step-10 checkpoint stages it from the bucket and continues.
    sft_ckpt = next(c for c in stack.request("GET", f"/v1/jobs/{ids['sft']}/checkpoints").json()["data"]
                    if c["step"] == 10)
    sft = PIPELINE[0]
    resumed = stack.run({"model": assets["model"], "training_file": files["sft_train"],
                         "validation_file": files["sft_val"], "method": sft["method"],
                         "from_checkpoint": sft_ckpt["id"], "suffix": "resumed"})
    assert resumed["status"] == "succeeded", resumed["error"]
    events = stack.events(resumed["id"])
    key = f"jobs/{ids['sft']}/checkpoints/step_10"  # events name the checkpoint by its key, never the bucket
    assert any(e["type"] == "job.log" and e["data"]["message"] == f"resumed from {key} at step 10" for e in events)
    steps = [e["data"]["step"] for e in events if e["type"] == "job.metrics"]
    assert steps == list(range(11, 21))
    staged = [d for d in stack.cache_dir.iterdir() if (d / "extra.json").is_file()]
    assert any(json.loads((d / "extra.json").read_text())["step"] == 10 for d in staged)
    assert not (stack.home / "artifacts").exists() or not any((stack.home / "artifacts").iterdir())

    # PPO too: every role worker stages its own part (actor, critic) of the step-3 checkpoint.
    ppo = PIPELINE[-1]
    resumed = stack.run({"model": outputs["sft"], "training_file": files["prompts_train"],
                         "validation_file": files["prompts_val"], "method": _resolve(ppo["method"], assets, outputs),
                         "from_checkpoint": step3["id"], "suffix": "resumed"})
    assert resumed["status"] == "succeeded", resumed["error"]
    events = stack.events(resumed["id"])
    key = f"jobs/{ids['ppo']}/checkpoints/step_3"
    assert any(e["type"] == "job.log" and e["data"]["message"].startswith(f"resumed from {key}: continuing after step 3 ")
               for e in events)
    assert [e["data"]["step"] for e in events if e["type"] == "job.metrics"] == [4, 5, 6]
