"""The jobs router (`/v1/jobs`) and the `{job_id}` path parameter with its owner check, which every
route on one job (here and in the other rooms) depends on."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi import Path as PathParam

from api.deps import CurrentProject, SessionDep
from api.errors import not_found
from core import logging as logcontext
from core.models import Job

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JobIdPath = Annotated[str, PathParam(max_length=64)]


def owned_job(job_id: JobIdPath, project: CurrentProject, db: SessionDep) -> Job:
    """The path's job if it belongs to the caller's project, else 404 (existence is not revealed)."""
    job = db.get(Job, job_id)
    if job is None or job.project_id != project.id:
        raise not_found("job", job_id, param="job_id")
    logcontext.annotate(job_id=job.id)
    return job


OwnedJob = Annotated[Job, Depends(owned_job)]
