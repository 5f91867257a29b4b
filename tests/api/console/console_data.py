"""The console tests' data and sizes: the viewports pages are checked at, and rows written straight
to the database and storage (a project with its key, an SFT file, jobs, models, checkpoints, events)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
LONG_TEACHER = "/models/" + "a-rather-long-directory-name/" * 3 + "teacher-final"
"""A reference long enough that the console cuts it in the middle."""
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


def _model(project_id: str, job_id: str | None, kind: str, base: str, fmt: str = "hf", path: str | None = None) -> str:
    from sqlalchemy import update

    from core.db import session_scope
    from core.ids import new_id
    from core.models import Job, Model

    model_id = new_id("model")
    with session_scope() as db:
        db.add(Model(id=model_id, project_id=project_id, job_id=job_id, name=f"{kind}-{model_id[-6:]}", kind=kind,
                     format=fmt, base_model=base, path=path or f"/nonexistent/{model_id}"))
        if job_id:
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
        "timing_s/step": 1.2, "perf/throughput": 300 + 10 * step, "perf/total_num_tokens": 1000, **({"val/reward/mean": 0.3 + 0.5 * x} if step % 5 == 0 else {})}}


def _samples(step: int) -> dict:
    """A `job.samples` event as PPO logs it: a few decoded rollouts of the step."""
    return {"step": step, "rows": [{"prompt": f"What is {step} + {i}?", "response": f"It is {step + i}.",
                                    "reward": 1.0 if i % 2 == 0 else 0.0} for i in range(3)]}


def _method_metrics(method: str, step: int) -> dict:
    """One step of a supervised method's metrics, under the engine's names; validation every 4 steps."""
    x = step / 12
    val = step % 4 == 0
    values = {
        "sft": {"train/loss": 2.0 - x, "train/token_accuracy": 0.3 + 0.5 * x, "train/lr": 1e-4,
                **({"train/skipped_step": 0.0} if step == 12 else {}),
                "perf/tokens_per_s": 900.0, **({"val/loss": 2.1 - x, "val/token_accuracy": 0.3 + 0.4 * x} if val else {})},
        "dpo": {"train/loss": 0.69 - 0.3 * x, "rewards/accuracies": 0.5 + 0.4 * x, "rewards/margins": 0.5 * x,
                "perf/tokens_per_s": 800.0, **({"val/loss": 0.7 - 0.25 * x, "val/rewards/accuracies": 0.5 + 0.3 * x} if val else {})},
        "reward_model": {"rm/loss": 0.69 - 0.3 * x, "rm/accuracy": 0.5 + 0.4 * x, "rm/margin_mean": x,
                         **({"val/rm/accuracy": 0.5 + 0.35 * x, "val/rm/loss": 0.7 - 0.2 * x} if val else {})},
        "rm_distill": {"distill/loss": 1.0 - 0.5 * x, "distill/agreement": 0.6 + 0.3 * x, "distill/kl": 0.5 - 0.3 * x,
                       **({"distill/val_loss": 1.05 - 0.5 * x} if val else {})},
    }[method]
    return {"step": step, "total_steps": 12, "values": values}


def _manifest(file_id: str, method: str, config: dict) -> dict:
    """A recorded manifest (what `workers.manifest` writes when an attempt starts) with `config`."""
    return {"version": 1, "job_id": "x", "attempt": 1, "recorded_at": 1767052800, "method": method,
            "packages": {"keel": "0.1.0", "torch": "2.5.1", "transformers": "4.46.0", "peft": None, "vllm": None,
                         "ray": "2.40.0"},
            "config": config, "resources": {"num_workers": 1}, "seeds": {"seed": 0},
            "datasets": {"training_file": {"id": file_id, "sha256": "ab" * 32}, "validation_file": None},
            "base_model": {"ref": "/models/base", "sha256": "cd" * 32, "algorithm": "sampled-sha256-v1"},
            "hardware": {"cpu_model": "Test CPU", "cpu_count": 8, "memory_bytes": 2**34, "gpus": [], "ray_nodes": 1},
            "image_digest": None, "from_checkpoint": None, "forked_from": None}


def _trainer(project_id: str, losses: list[float]) -> str:
    """An idle LoRA trainer whose operations are forward_backward + optim_step pairs with these losses."""
    from datetime import timedelta

    from core.db import session_scope
    from core.models import Trainer, TrainerOperation, utcnow

    now = utcnow()
    with session_scope() as db:
        trainer = Trainer(project_id=project_id, status="idle", model="/models/base", base_model_path="/models/base",
                          lora={"rank": 8}, step=len(losses), tokens=64 * len(losses), last_op_seq=2 * len(losses))
        db.add(trainer)
        db.flush()
        for i, loss in enumerate(losses):
            at = now - timedelta(seconds=60 - i)
            db.add(TrainerOperation(trainer_id=trainer.id, project_id=project_id, seq=2 * i + 1, kind="forward_backward",
                                    status="succeeded", tokens=64, result={"metrics": {"loss:sum": loss}},
                                    created_at=at, started_at=at, finished_at=at))
            db.add(TrainerOperation(trainer_id=trainer.id, project_id=project_id, seq=2 * i + 2, kind="optim_step",
                                    status="succeeded", result={"step": i + 1, "metrics": {}},
                                    created_at=at, started_at=at, finished_at=at))
        return trainer.id
