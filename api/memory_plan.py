"""The memory plan of a create request (`POST /v1/jobs?dry_run=true`) and the `will_not_fit` check of
a real create. The arithmetic is `core.memory_plan`'s; this module finds the models' directories,
the deployment's capacity, and turns the verdict into a response or a problem."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from api.errors import ApiError
from api.schemas.memory_plan import MemoryPlan
from core import checkpoints
from core.config import settings
from core.memory_plan import Capacity, plan_for_dirs
from core.models import Model


def _local_dir(db: Session, ref: str | None) -> str | None:
    """A directory this process can read for a model reference (a Keel model stored locally, or an
    absolute directory the create already checked); None for hub ids and remote stores."""
    if not ref:
        return None
    if ref.startswith("model-"):
        model = db.get(Model, ref)
        path = model.path if model is not None else None
        return path if path and path.startswith("/") else None
    if ref.startswith("ckpt-"):
        return checkpoints.local_export(db, ref)
    return ref if ref.startswith("/") else None


def capacity() -> Capacity:
    return Capacity(gpu_bytes=settings.GPU_MEMORY_BYTES or None, host_bytes=settings.WORKER_MEMORY_BYTES or None)


def job_plan(db: Session, spec: dict[str, Any]) -> dict[str, Any]:
    """The plan of a validated, resolved create request (`spec`, as stored in a job row)."""
    method = spec["method"]
    dirs = {"policy": _local_dir(db, spec.get("model")),
            "teacher": _local_dir(db, method.get("teacher")),
            "reward": _local_dir(db, (method.get("reward") or {}).get("model")),
            "compare": _local_dir(db, method.get("compare_to"))}
    try:
        return plan_for_dirs(method["type"], method.get("hyperparameters") or {}, spec.get("resources") or {},
                             dirs, capacity())
    except (ValueError, TypeError, KeyError, OverflowError) as e:  # PlanError, or a config.json of another shape
        gpus = float((spec.get("resources") or {}).get("gpus_per_worker") or 0.0)
        return {"object": "memory_plan", "method": method["type"], "device": "gpu" if gpus > 0 else "cpu",
                "num_workers": int((spec.get("resources") or {}).get("num_workers") or 1),
                "colocated": False, "per_worker": None, "roles": {},
                "capacity": {"gpu_bytes": capacity().gpu_bytes, "host_bytes": capacity().host_bytes},
                "fits": None, "param": None, "detail": f"no estimate: {e}"}


def dry_run_response(plan: dict[str, Any]) -> JSONResponse:
    return JSONResponse(MemoryPlan.model_validate(plan).model_dump(mode="json"), status_code=200)


def refuse_unfit(plan: dict[str, Any]) -> None:
    """A 422 `will_not_fit` when the plan says the job cannot fit its devices; the plan's numbers go
    in the problem body (`memory_plan`)."""
    if plan.get("fits") is not False:
        return
    param = plan.get("param") or "resources"
    raise ApiError(422, "will_not_fit", f"{param}: the job will not fit in memory: {plan['detail']}.",
                   param=param, extensions={"memory_plan": MemoryPlan.model_validate(plan).model_dump(mode="json")})
