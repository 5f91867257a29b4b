"""`keel files|jobs|checkpoints|models` against a live server: output, exit codes and problem messages."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import yaml

PAIRS = "".join(json.dumps({"prompt": f"Q{i}?", "chosen": f"Sure {i}.", "rejected": f"No {i}."}) + "\n"
                for i in range(6))


def _model_dir(keel_home: Path) -> str:
    path = keel_home / "models" / "cli-test-model"
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    return str(path)


def _upload(run_keel, tmp_path: Path) -> str:
    data = tmp_path / "pairs.jsonl"
    data.write_text(PAIRS)
    result = run_keel("files", "upload", str(data), "--purpose", "preference")
    assert result.exit_code == 0, result.output
    assert "6 rows" in result.stderr
    return result.stdout.strip().splitlines()[-1]


def _create(run_keel, tmp_path: Path, keel_home: Path, file_id: str, **extra) -> str:
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({"model": "org/ignored", "seed": 3, "method": {"hyperparameters": {
        "data": {"train_batch_size": 4, "max_length": 64}, "trainer": {"total_training_steps": 3}}}, **extra}))
    result = run_keel("jobs", "create", "--method", "reward_model", "--config", str(config),
                      "--model", _model_dir(keel_home), "--training-file", file_id, "--set", "optim.lr=0.001")
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[-1]


def test_upload_create_list_cancel(cli_env, no_dispatch, run_keel, tmp_path, keel_home):
    file_id = _upload(run_keel, tmp_path)
    assert file_id.startswith("file-")
    job_id = _create(run_keel, tmp_path, keel_home, file_id)
    assert no_dispatch == []  # a create publishes nothing: the sweepers send the job

    shown = json.loads(run_keel("jobs", "get", job_id).stdout)
    hp = shown["method"]["hyperparameters"]
    assert shown["seed"] == 3 and shown["model"].endswith("cli-test-model")  # the flag beat the YAML
    assert hp["optim"]["lr"] == 0.001 and hp["trainer"]["total_training_steps"] == 3

    listed = run_keel("jobs", "list")
    assert listed.exit_code == 0 and job_id in listed.stdout and "queued" in listed.stdout
    assert file_id in run_keel("files", "list").stdout

    cancelled = run_keel("jobs", "cancel", job_id)
    assert cancelled.exit_code == 0 and cancelled.stdout.strip() == f"{job_id} cancelled"
    again = run_keel("jobs", "cancel", job_id)
    assert again.exit_code == 1 and "Conflict" in again.stderr and "job_id" not in again.stdout


def test_pause_and_resume(cli_env, no_dispatch, run_keel, tmp_path, keel_home):
    job_id = _create(run_keel, tmp_path, keel_home, _upload(run_keel, tmp_path))
    paused = run_keel("jobs", "pause", job_id)  # queued: paused at once
    assert paused.exit_code == 0 and paused.stdout.strip() == f"{job_id} paused"
    assert "paused" in run_keel("jobs", "list").stdout
    resumed = run_keel("jobs", "resume", job_id)
    assert resumed.exit_code == 0 and resumed.stdout.strip() == f"{job_id} queued"
    assert no_dispatch[-1] == ("enqueue_job", job_id)
    again = run_keel("jobs", "resume", job_id)
    assert again.exit_code == 1 and "Conflict" in again.stderr and "(param: job_id)" in again.stderr


def test_problems_print_title_detail_and_param(cli_env, no_dispatch, run_keel, tmp_path, keel_home):
    file_id = _upload(run_keel, tmp_path)
    result = run_keel("jobs", "create", "--method", "reward_model", "--model", _model_dir(keel_home),
                      "--training-file", file_id, "--set", "optim.lr=7")
    assert result.exit_code == 1
    assert "Unprocessable Content" in result.stderr and "(param: method.hyperparameters.optim.lr)" in result.stderr
    missing = run_keel("jobs", "watch", "job-nope")
    assert missing.exit_code == 1 and "Not Found" in missing.stderr and "job_id" in missing.stderr
    usage = run_keel("jobs", "create", "--method", "sft")
    assert usage.exit_code == 1 and "model" in usage.stderr


def test_connection_and_key_errors(run_keel, monkeypatch, tmp_path):
    monkeypatch.setenv("KEEL_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("KEEL_API_KEY", "keel_x")
    down = run_keel("jobs", "list")
    assert down.exit_code == 1 and "Cannot reach Keel" in down.stderr
    monkeypatch.delenv("KEEL_API_KEY")
    monkeypatch.setenv("KEEL_HOME", str(tmp_path))
    nokey = run_keel("jobs", "list")
    assert nokey.exit_code == 1 and "No API key" in nokey.stderr
    (tmp_path / "api_key").write_text("keel_from_file\n")
    from keel_cli.client import api_key

    assert api_key() == "keel_from_file"


def _append(job_id: str, type: str, data: dict) -> None:
    from core.db import session_scope
    from core.events import append_event

    with session_scope() as db:
        append_event(db, job_id, type, data)


def test_watch_draws_progress_until_the_end(cli_env, no_dispatch, run_keel, tmp_path, keel_home, live_server,
                                           project_key):
    job_id = _create(run_keel, tmp_path, keel_home, _upload(run_keel, tmp_path))

    def play_worker():
        time.sleep(0.5)
        _append(job_id, "job.log", {"message": "loading the model"})
        for step in (1, 2, 3):
            _append(job_id, "job.metrics", {"step": step, "total_steps": 3,
                                            "values": {"rm/loss": 0.5 / step, "rm/accuracy": 0.9}})
        _append(job_id, "job.warning", {"code": "kl_high", "message": "KL is high", "data": {}})
        # Over HTTP, not `run_keel`: a second CliRunner in this thread would swap sys.stdout/stderr
        # under the running `watch` and swallow its output.
        r = httpx.post(f"{live_server}/v1/jobs/{job_id}/cancel",
                       headers={"Authorization": f"Bearer {project_key[1]}"}, timeout=30)
        assert r.status_code == 200, r.text

    worker = threading.Thread(target=play_worker)
    worker.start()
    result = run_keel("jobs", "watch", job_id)
    worker.join()
    assert result.exit_code == 1, result.output  # cancelled, not succeeded
    out = result.stderr
    assert "3/3" in out and "rm/loss=0.1667" in out and "rm/accuracy=0.9" in out
    assert "loading the model" in out and "kl_high" in out and f"{job_id} cancelled" in out


def test_checkpoint_download_unpacks_into_the_directory(cli_env, no_dispatch, run_keel, tmp_path, keel_home):
    from core.db import session_scope
    from core.models import Checkpoint

    job_id = _create(run_keel, tmp_path, keel_home, _upload(run_keel, tmp_path))
    src = tmp_path / "ckpt"
    (src / "actor" / "hf").mkdir(parents=True)
    (src / "actor" / "model.safetensors").write_bytes(bytes(range(256)) * 100)
    (src / "actor" / "hf" / "config.json").write_text("{}")
    (src / "COMPLETE").write_text("")
    with session_scope() as db:
        ckpt = Checkpoint(job_id=job_id, project_id=cli_env, step=1, path=str(src), bytes=25600)
        db.add(ckpt)
        db.flush()
        ckpt_id = ckpt.id
    out = tmp_path / "downloaded"
    result = run_keel("checkpoints", "download", ckpt_id, str(out))
    assert result.exit_code == 0, result.output
    assert (out / "config.json").read_text() == "{}" and "1 files" in result.stderr
    result = run_keel("checkpoints", "download", ckpt_id, str(out), "--training-state")
    assert result.exit_code == 0, result.output
    assert (out / "training_state" / "actor" / "model.safetensors").read_bytes() == bytes(range(256)) * 100
    assert (out / "training_state" / "COMPLETE").exists() and "3 files" in result.stderr
    missing = run_keel("checkpoints", "download", "ckpt-nope", str(out))
    assert missing.exit_code == 1 and "Not Found" in missing.stderr
    run_keel("jobs", "cancel", job_id)
