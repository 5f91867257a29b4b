"""A job's TensorBoard event files (its `tensorboard` integration), as a tar streamed on the fly."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from api import archive
from api.errors import ApiError, problem_responses
from api.routes.jobs import OwnedJob
from core.integrations import tensorboard_key
from core.storage import get_storage

router = APIRouter(tags=["jobs"])


@router.get("/v1/jobs/{job_id}/tensorboard", summary="Download job TensorBoard logs", response_class=StreamingResponse,
            responses={200: {"content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
                             "description": "A tar of the job's TensorBoard log directory."},
                       **problem_responses(401, 404, 429)})
def download_job_tensorboard(job: OwnedJob):
    """The event files the job's `tensorboard` integration wrote so far (run `tensorboard --logdir` on the
    unpacked directory). 404 `tensorboard_unavailable` for a job without that integration, before its
    first metrics, or (remote artifact stores) before it finished."""
    storage = get_storage()
    entries = archive.files(storage, storage.location(tensorboard_key(job.id)))
    if not entries:
        raise ApiError(404, "tensorboard_unavailable", f"Job {job.id} has no TensorBoard logs yet.", param="job_id")
    stem = f"{job.id}-tensorboard"
    return StreamingResponse(archive.stream(storage, entries, stem), media_type="application/x-tar",
                             headers=archive.content_disposition(f"{stem}.tar"))
