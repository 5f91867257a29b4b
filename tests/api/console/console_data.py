"""The console tests' data and sizes: the viewports pages are checked at, and rows written straight
to the database and storage (a project with its key, an SFT file, jobs, models, checkpoints, events)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
SFT_ROWS = [{"prompt": f"What is {i} + {i}?", "response": f"{2 * i}"} for i in range(12)]


def _project(name: str) -> tuple[str, str]:
    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project

    with session_scope() as db:
        project, _ = get_or_create_project(db, name)
        return project.id, create_api_key(db, project)


def _file(project_id: str) -> str:
    from core.db import session_scope
    from core.ids import new_id
    from core.models import File
    from core.storage import get_storage

    file_id = new_id("file")
    data = "".join(json.dumps(r) + "\n" for r in SFT_ROWS).encode()
    with get_storage().writer(f"files/{file_id}") as f:
        f.write(data)
    with session_scope() as db:
        db.add(File(id=file_id, project_id=project_id, purpose="sft", filename="arith.jsonl", bytes=len(data),
                    sha256=hashlib.sha256(data + file_id.encode()).hexdigest(), format="jsonl", rows=len(SFT_ROWS),
                    columns=["prompt", "response"], storage_key=f"files/{file_id}"))
    return file_id


def _job(project_id: str, file_id: str, model: str, method: dict, **columns) -> str:
    from core.db import session_scope
    from core.ids import new_id
    from core.models import Job

    spec = {"model": model, "training_file": file_id, "validation_file": None,
            "method": {"hyperparameters": {}, **method}, "seed": 0, "suffix": None, "metadata": {},
            "resources": {"num_workers": 1}, "from_checkpoint": None}
    job_id = new_id("job")
    with session_scope() as db:
        db.add(Job(id=job_id, project_id=project_id, method=method["type"], spec=spec, model=model,
                   training_file_id=file_id, **columns))
    return job_id


def _model(project_id: str, job_id: str, kind: str, base: str, fmt: str = "hf") -> str:
    from sqlalchemy import update

    from core.db import session_scope
    from core.ids import new_id
    from core.models import Job, Model

    model_id = new_id("model")
    with session_scope() as db:
        db.add(Model(id=model_id, project_id=project_id, job_id=job_id, name=f"{kind}-{model_id[-6:]}", kind=kind,
                     format=fmt, base_model=base, path=f"/nonexistent/{model_id}"))
        db.execute(update(Job).where(Job.id == job_id).values(output_model_id=model_id))
    return model_id


def _checkpoint(project_id: str, job_id: str, step: int) -> str:
    """A checkpoint row (no files: the e2e test downloads a real one)."""
    from core.db import session_scope
    from core.ids import new_id
    from core.models import Checkpoint

    ckpt_id = new_id("ckpt")
    with session_scope() as db:
        db.add(Checkpoint(id=ckpt_id, job_id=job_id, project_id=project_id, step=step, path=f"/nonexistent/{ckpt_id}",
                          bytes=1234))
    return ckpt_id


def _events(job_id: str, events: list[tuple[str, dict]]) -> None:
    from core import events as event_log
    from core.db import session_scope

    with session_scope() as db:
        for type_, data in events:
            event_log.append_event(db, job_id, type_, data)


def _metrics(step: int, total: int) -> dict:
    x = step / total
    return {"step": step, "total_steps": total, "values": {
        "critic/score/mean": 0.2 + 0.6 * x, "actor/ppo_kl": 0.01 * (1 + x), "actor/entropy": 2.0 - x,
        "actor/pg_loss": 0.5 * (1 - x), "critic/vf_loss": 1.0 - 0.8 * x, "response_length/mean": 8 + 4 * x,
        "timing_s/step": 1.2, "perf/throughput": 300 + 10 * step, **({"val/reward/mean": 0.3 + 0.5 * x} if step % 5 == 0 else {})}}
