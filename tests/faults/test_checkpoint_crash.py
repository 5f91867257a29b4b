"""Crashes while a checkpoint is written: a half-written checkpoint is never resumed from.

A real process is SIGKILLed in the middle of `engine.runtime.checkpoint.atomic_dir`; what it leaves (a
temporary directory), and a `step_<N>` directory without its `COMPLETE` marker, are ignored when a
re-queued job's request is resolved, and refused by the engine if named explicitly. A complete
checkpoint the event log does not account for (written by a controller whose reports were already
being dropped) is not resumed from either: that would leave its step, or the checkpoint itself, out
of the log.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fault_processes import ROOT

from core.db import session_scope
from core.ids import new_id
from core.models import Checkpoint, File, Job, utcnow
from core.security import get_or_create_project
from core.storage import get_storage
from engine.runtime.checkpoint import CheckpointError, atomic_dir, latest_checkpoint, step_dir
from engine.runtime.reporting import RecordingReporter
from workers.resolve import job_dirs, resolve_request

pytestmark = [pytest.mark.faults, pytest.mark.slow]

_WRITER = """
import os, sys, time
from engine.runtime.checkpoint import atomic_dir, step_dir
with atomic_dir(step_dir(sys.argv[1], int(sys.argv[2]))) as tmp:
    os.makedirs(os.path.join(tmp, "actor"))
    with open(os.path.join(tmp, "actor", "model.safetensors"), "wb") as f:
        f.write(b"\\0" * 4096)
        f.flush()
        print("writing", flush=True)
        time.sleep(60)
"""
"""Starts writing step N's checkpoint and hangs in the middle of it (until it is killed)."""


@pytest.fixture
def ppo_job(fault_db, fault_assets):
    """A PPO job row (as the API writes it) re-queued after its worker died and sent again (so the stack's
    sweeper leaves it alone): a training file in the store, no events."""
    file_id, job_id = new_id("file"), new_id("job")
    data = Path(fault_assets["prompts_train"]).read_bytes()
    with get_storage().writer(f"files/{file_id}") as f:
        f.write(data)
    spec = {"model": fault_assets["model"], "training_file": file_id, "validation_file": None, "seed": 7,
            "method": {"type": "ppo", "reward": {"function": "gsm8k"},
                       "hyperparameters": {"trainer": {"total_training_steps": 8, "save_freq": 2}}},
            "resources": {"num_workers": 1}, "from_checkpoint": None, "suffix": None, "metadata": {}}
    with session_scope(fault_db) as db:
        project, _ = get_or_create_project(db, "faults-checkpoints")
        db.add(File(id=file_id, project_id=project.id, purpose="prompts", filename="prompts.parquet",
                    bytes=len(data), sha256=hashlib.sha256(data + file_id.encode()).hexdigest(), format="parquet",
                    storage_key=f"files/{file_id}"))
        db.flush()
        db.add(Job(id=job_id, project_id=project.id, method="ppo", spec=spec, model=spec["model"],
                   training_file_id=file_id, seed=7, status="queued", attempts=1, dispatched_at=utcnow()))
    yield job_id
    with session_scope(fault_db) as db:
        db.get(Job, job_id).status = "cancelled"


def set_logged_step(db_url: str, job_id: str, step: int | None) -> None:
    with session_scope(db_url) as db:
        db.get(Job, job_id).progress = None if step is None else {"step": step, "total_steps": 8}


def record_checkpoint(db_url: str, job_id: str, step: int, path: str) -> None:
    """The `Checkpoint` row `DBReporter.checkpoint` writes with the step's `job.checkpoint` event."""
    with session_scope(db_url) as db:
        job = db.get(Job, job_id)
        db.add(Checkpoint(job_id=job_id, project_id=job.project_id, step=step, path=path))


def resume_point(db_url: str, job_id: str) -> str | None:
    with session_scope(db_url) as db:
        return resolve_request(db, db.get(Job, job_id)).resume_from


def write_complete(root: str, step: int) -> str:
    with atomic_dir(step_dir(root, step)) as tmp:
        os.makedirs(os.path.join(tmp, "actor"))
        Path(tmp, "actor", "COMPLETE").write_text("ok\n")
    return step_dir(root, step)


def test_a_checkpoint_write_killed_midway_is_never_resumed_from(fault_db, ppo_job):
    root = job_dirs(ppo_job)[1]
    step_2 = write_complete(root, 2)

    writer = subprocess.Popen([sys.executable, "-c", _WRITER, root, "4"], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert writer.stdout.readline().strip() == "writing", writer.stdout.read()
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
    leftovers = sorted(p.name for p in Path(root).iterdir())
    assert leftovers[0].startswith(".step_4.tmp-") and leftovers[1:] == ["step_2"], leftovers
    half_written = Path(root) / leftovers[0]
    assert (half_written / "actor" / "model.safetensors").is_file() and not (half_written / "COMPLETE").exists()

    # And a step directory that never got its marker (a copy cut short, an older writer).
    (Path(root) / "step_6" / "actor").mkdir(parents=True)
    set_logged_step(fault_db, ppo_job, 6)  # the log is past both: only the marker rules them out

    assert latest_checkpoint(root) == step_2
    assert resume_point(fault_db, ppo_job) == step_2

    # Named explicitly, the engine refuses a half-written checkpoint before starting anything.
    from engine.methods.ppo import run_ppo

    with session_scope(fault_db) as db:
        request = resolve_request(db, db.get(Job, ppo_job))
    for bad in (half_written, Path(root) / "step_6"):
        with pytest.raises(CheckpointError):
            run_ppo(dataclasses.replace(request, resume_from=str(bad)), RecordingReporter())


def test_a_checkpoint_newer_than_the_event_log_is_not_resumed_from(fault_db, ppo_job):
    """Step 6 was saved by an orphaned controller after the job was re-queued (its step-6 metrics
    were dropped): the re-run resumes from step 4 and reports step 6 itself. (No checkpoint recorded
    at all: the newest complete directory not past the log's last step.)"""
    root = job_dirs(ppo_job)[1]
    step_4 = write_complete(root, 4)
    step_6 = write_complete(root, 6)
    set_logged_step(fault_db, ppo_job, 5)
    assert resume_point(fault_db, ppo_job) == step_4
    set_logged_step(fault_db, ppo_job, 6)
    assert resume_point(fault_db, ppo_job) == step_6


def test_a_checkpoint_whose_report_was_dropped_is_not_resumed_from(fault_db, ppo_job):
    """Step 6's metrics made it into the log, but the job was re-queued while step 6's checkpoint was
    being saved, so its report was dropped: the re-run resumes from step 4, the newest checkpoint the
    log recorded, and records step 6 when it saves it again."""
    root = job_dirs(ppo_job)[1]
    record_checkpoint(fault_db, ppo_job, 2, write_complete(root, 2))
    step_4 = write_complete(root, 4)
    record_checkpoint(fault_db, ppo_job, 4, step_4)
    write_complete(root, 6)
    set_logged_step(fault_db, ppo_job, 6)
    assert resume_point(fault_db, ppo_job) == step_4

    # A recorded checkpoint whose files are gone is skipped.
    (Path(step_4) / "COMPLETE").unlink()
    assert resume_point(fault_db, ppo_job) == step_dir(root, 2)
