"""`keel models list`, `keel checkpoints list`, `keel jobs logs [--follow]`, `keel jobs delete`,
`keel trainers list|delete` against a live server; and the CLI finding `keel up` by `KEEL_HOST`/`KEEL_PORT`."""

from __future__ import annotations

import secrets
import threading
import time
from urllib.parse import urlsplit

from sqlalchemy import update

from core.db import session_scope
from core.events import append_event
from core.models import Checkpoint, File, Job, Model, Trainer, utcnow


def _job(project_id: str, status: str = "succeeded") -> str:
    """A job row (no worker runs it) on a file row of its own."""
    with session_scope() as db:
        file = File(project_id=project_id, purpose="preference", filename="p.jsonl", bytes=1, rows=1,
                    sha256=secrets.token_hex(32), format="jsonl", columns=["prompt", "chosen", "rejected"],
                    storage_key="files/none")
        db.add(file)
        db.flush()
        spec = {"model": "/models/base", "training_file": file.id, "validation_file": None, "seed": 0,
                "method": {"type": "reward_model", "hyperparameters": {}}, "suffix": None, "metadata": {},
                "resources": {"num_workers": 1}, "from_checkpoint": None}
        job = Job(project_id=project_id, method="reward_model", model="/models/base", training_file_id=file.id,
                  spec=spec, status=status)
        db.add(job)
        db.flush()
        return job.id


def _append(job_id: str, type: str, data: dict) -> None:
    with session_scope() as db:
        append_event(db, job_id, type, data)


def test_keel_port_and_host_find_the_service(run_keel, live_server, project_key, monkeypatch):
    """`keel up` listens on KEEL_HOST:KEEL_PORT; the client commands (and `keel demo`) go there too."""
    monkeypatch.delenv("KEEL_URL", raising=False)
    monkeypatch.setenv("KEEL_API_KEY", project_key[1])
    monkeypatch.setenv("KEEL_PORT", str(urlsplit(live_server).port))
    monkeypatch.setenv("KEEL_HOST", "0.0.0.0")  # a wildcard bind is reached on loopback
    result = run_keel("jobs", "list")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("id\tmethod")
    monkeypatch.setenv("KEEL_PORT", "9")
    down = run_keel("models", "list")
    assert down.exit_code == 1 and "http://127.0.0.1:9" in down.stderr


def test_models_and_checkpoints_list(cli_env, run_keel):
    job_id = _job(cli_env)
    with session_scope() as db:
        model = Model(project_id=cli_env, name="rm-a", kind="reward_model", format="hf", base_model="/models/base",
                      path="/nowhere", job_id=job_id)
        db.add(model)
        db.add(Checkpoint(job_id=job_id, project_id=cli_env, step=4, path="/nowhere/4", bytes=1234,
                          metrics={"rm/accuracy": 0.75}))
        db.flush()
        model_id = model.id
    listed = run_keel("models", "list")
    assert listed.exit_code == 0, listed.output
    rows = [line.split("\t") for line in listed.stdout.strip().splitlines()]
    assert rows[0][:3] == ["id", "kind", "format"] and [model_id, "reward_model", "hf", "rm-a"] == rows[1][:4]
    # Only policies: the project has none, so what is listed are the shared base models (their ids are paths).
    policies = [line.split("\t") for line in run_keel("models", "list", "--kind", "policy").stdout.strip().splitlines()]
    assert policies[0][:2] == ["id", "kind"] and all(r[1] == "policy" and r[0].startswith("/") for r in policies[1:])
    assert model_id not in {r[0] for r in policies}

    ckpts = run_keel("checkpoints", "list", job_id)
    assert ckpts.exit_code == 0, ckpts.output
    line = ckpts.stdout.strip().splitlines()[1].split("\t")
    assert line[0].startswith("ckpt-") and line[1:3] == ["4", "1234"] and "rm/accuracy=0.75" in line[4]
    missing = run_keel("checkpoints", "list", "job-nope")
    assert missing.exit_code == 1 and "Not Found" in missing.stderr


def test_jobs_logs_and_follow(cli_env, run_keel):
    job_id = _job(cli_env, status="running")
    _append(job_id, "job.status", {"status": "running"})
    _append(job_id, "job.log", {"message": "loading the model"})
    # PPO's four colocated roles: four entries, one process (the log line says "1 worker(s)").
    _append(job_id, "job.placement", {"workers": [{"role": r, "rank": 0, "node_id": "n1", "node_ip": "10.0.0.1",
                                                   "pid": 42} for r in ("actor", "critic", "ref", "reward")]})
    for step in (1, 2):
        _append(job_id, "job.metrics", {"step": step, "total_steps": 3, "values": {"rm/loss": 0.5 / step}})
    logs = run_keel("jobs", "logs", job_id)
    assert logs.exit_code == 0, logs.output
    lines = logs.stdout.strip().splitlines()
    assert len(lines) == 5 and lines[1].endswith("loading the model") and lines[4].endswith("step 2/3  rm/loss=0.25")
    assert lines[2].endswith("placed actor, critic, ref, reward: 1 process(es) on 1 node(s)")

    def finish():  # the worker's last events, while `--follow` waits on the stream
        time.sleep(1.0)
        _append(job_id, "job.warning", {"code": "kl_high", "message": "KL is high", "data": {}})
        with session_scope() as db:
            db.execute(update(Job).where(Job.id == job_id).values(status="succeeded", finished_at=utcnow()))
        _append(job_id, "job.status", {"status": "succeeded"})
        _append(job_id, "job.done", {"status": "succeeded"})

    thread = threading.Thread(target=finish)
    thread.start()
    followed = run_keel("jobs", "logs", job_id, "--follow")
    thread.join()
    assert followed.exit_code == 0, followed.output
    lines = followed.stdout.strip().splitlines()
    assert len(lines) == 8 and "warning kl_high: KL is high" in lines[5] and lines[-1].endswith("done: succeeded")


def test_jobs_delete(cli_env, run_keel):
    active = _job(cli_env, status="queued")
    refused = run_keel("jobs", "delete", active)
    assert refused.exit_code == 1 and "Conflict" in refused.stderr
    done = _job(cli_env)
    deleted = run_keel("jobs", "delete", done)
    assert deleted.exit_code == 0 and deleted.stdout.strip() == f"{done} deleted"
    assert "Not Found" in run_keel("jobs", "get", done).stderr
    with session_scope() as db:
        db.execute(update(Job).where(Job.id == active).values(status="cancelled"))


def test_trainers_list_and_delete(cli_env, run_keel, monkeypatch):
    from workers import dispatch

    sent: list[str] = []
    monkeypatch.setattr(dispatch, "enqueue_trainer", sent.append)  # no worker holds an actor here
    with session_scope() as db:
        trainer = Trainer(project_id=cli_env, model="/models/base", base_model_path="/models/base")
        db.add(trainer)
        db.flush()
        trainer_id = trainer.id
    listed = run_keel("trainers", "list")
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.strip().splitlines()[1].split("\t")[:3] == [trainer_id, "active", "/models/base"]
    deleted = run_keel("trainers", "delete", trainer_id)
    assert deleted.exit_code == 0 and deleted.stdout.strip() == f"{trainer_id} deleted" and sent == [trainer_id]
    assert run_keel("trainers", "list", "--status", "active").stdout.strip().count("\n") == 0
    missing = run_keel("trainers", "delete", "trainer-nope")
    assert missing.exit_code == 1 and "Not Found" in missing.stderr
