"""OpenAI's grader endpoints (`fine_tuning.alpha.graders.run` / `.validate`); the graders are checked and
run as job creation checks them (api/graders.py), in a child process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter, Request

from api.deps import CurrentProject, SessionDep
from api.errors import ApiError, problem_responses
from api.graders import checked_grader, grader_process_async, model_ref, refused
from api.openai.schemas import GraderRun, GraderValidate
from api.ratelimit import RENEW_S, StreamSlots
from core import checkpoints
from core.config import settings
from core.storage import is_url

router = APIRouter(prefix="/v1/fine_tuning/alpha/graders", tags=["fine_tuning"])
_runs = StreamSlots(settings.REDIS_URL or None, prefix=f"keel:{settings.QUEUE_NAMESPACE}grader-runs")
"""Running `graders/run` calls: leases per API key and under `*` for the deployment (shared by the API
processes through Redis, as event streams are; each process counts its own without it)."""


@contextlib.asynccontextmanager
async def _run_slot(key_id: str) -> AsyncIterator[None]:
    """One of the key's `KEEL_MAX_GRADER_RUNS_PER_KEY` and the deployment's `KEEL_MAX_GRADER_RUNS`
    running grader calls, held (and renewed) while the body runs; a 429 `too_many_grader_runs` when
    either is taken."""
    leases = []
    renewer = None
    try:
        for owner, cap, whose in ((key_id, settings.MAX_GRADER_RUNS_PER_KEY, "This API key already has"),
                                  ("*", settings.MAX_GRADER_RUNS, "The deployment already has")):
            lease = await anyio.to_thread.run_sync(_runs.acquire, owner, cap)
            if lease is None:
                raise ApiError(429, "too_many_grader_runs", f"{whose} {cap} grader runs in progress; retry when "
                               "one has finished.", headers={"Retry-After": "5"})
            leases.append(lease)
        renewer = asyncio.create_task(_renew(leases))
        yield
    finally:
        if renewer is not None:
            renewer.cancel()
        with anyio.CancelScope(shield=True):
            for lease in leases:
                await anyio.to_thread.run_sync(_runs.release, lease)


async def _renew(leases: list) -> None:
    while True:
        await asyncio.sleep(RENEW_S)
        for lease in leases:
            if lease.shared:
                await anyio.to_thread.run_sync(_runs.renew, lease)


@router.post("/run", summary="Run a grader", responses=problem_responses(400, 401, 429))
async def run_grader(body: GraderRun, project: CurrentProject, db: SessionDep, request: Request) -> dict[str, Any]:
    """OpenAI's `fine_tuning.alpha.graders.run`: the grader's reward of `model_sample` for `item`. A sample
    the grader cannot score has reward 0 and the reason in `metadata.errors`."""
    # At most KEEL_MAX_GRADER_RUNS_PER_KEY runs per key and KEEL_MAX_GRADER_RUNS in the deployment at once
    # (429 too_many_grader_runs beyond: README's configuration table).
    item = dict(body.item or {})
    if body.reference_answer is not None:
        item.setdefault("reference_answer", body.reference_answer)
    # Async: the grader's process is awaited on the event loop, so slow graders hold no worker thread
    # (and /healthz or other tenants' calls never queue behind them); only the DB look-ups use one.
    async with _run_slot(request.state.caller.key_id):
        validated = await grader_process_async({"op": "validate", "grader": body.grader})
        refused(validated, "grader", 400)

        def locate() -> dict[str, str]:
            return {ref: checkpoints.model_location(db, model_ref(db, project.id, ref, param))
                    for ref, param in validated["models"]}

        models = await anyio.to_thread.run_sync(locate) if validated["models"] else {}
        run: dict[str, Any] = {"op": "run", "grader": body.grader, "model_sample": body.model_sample, "item": item,
                               "models": models}
        if any(is_url(location) for location in models.values()):
            run["storage"] = {"options": dict(settings.STORAGE_OPTIONS),
                              "cache_dir": settings.ARTIFACT_CACHE_DIR or None}
        result = await grader_process_async(run)
    refused(result, "grader", 400)
    return result


@router.post("/validate", summary="Validate a grader", responses=problem_responses(400, 401, 429))
def validate_grader(body: GraderValidate, project: CurrentProject, db: SessionDep) -> dict[str, Any]:
    """OpenAI's `fine_tuning.alpha.graders.validate`: the grader back when it is valid (its score_model
    graders naming models of this project), else a 400 naming the field."""
    checked_grader(db, project.id, body.grader, "grader")
    return {"grader": body.grader}
