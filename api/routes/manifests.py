"""A job's manifest: what its latest attempt ran with (`workers.manifest` records it when the attempt
starts; the job row is the source of truth)."""

from __future__ import annotations

from fastapi import APIRouter

from api.errors import ApiError, problem_responses
from api.routes.jobs import OwnedJob
from api.schemas.manifests import JobManifest

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.get("/{job_id}/manifest", summary="Retrieve a job's manifest", response_model=JobManifest,
            responses=problem_responses(401, 404, 429))
def get_job_manifest(job: OwnedJob):
    """Package versions, the resolved hyperparameters, seeds, dataset and base-model hashes, hardware and
    image digest of the job's latest attempt, recorded by the worker when it started. A job no attempt
    has started yet (queued) is a 404 `manifest_not_ready`."""
    if not job.manifest:
        raise ApiError(404, "manifest_not_ready", f"job_id: job {job.id} is {job.status}; its manifest is recorded "
                       "when a worker starts it.", param="job_id")
    return JobManifest.model_validate({**job.manifest, "job_id": job.id})
