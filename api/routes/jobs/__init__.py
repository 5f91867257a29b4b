"""Jobs: create (validated and stored; the workers send it), list, retrieve, cancel, pause and resume.

A job row is the contract with the workers: it is committed as `queued` with the validated request
(every hyperparameter filled in) in `spec` and `dispatched_at` null. The API never talks to the
broker on a create: the workers' sweepers send the job, woken by the commit (`workers.wakeup`), so a
broker outage or a slow broker never slows or fails a create. Referenced ids that are not this project's
(files, models, checkpoints) are 404s with `param` naming the field, exactly as unknown ids are.

The routes live by what they serve: `creation` (with `admission`, the create request's checks),
`listing` (list and retrieve) and `lifecycle` (cancel, pause, resume, delete); `public` is a job's
public shape, `paths` the router and the owned-job dependency they share.
"""

from __future__ import annotations

# isort: off
# The routes register on the shared router as their modules load: this order is the order they are
# matched in and documented (`POST ""` and `GET ""`, then `/{job_id}`, then its actions).
from api.routes.jobs import creation
from api.routes.jobs import listing
from api.routes.jobs import lifecycle
# isort: on
from api.routes.jobs.paths import JobIdPath, OwnedJob, owned_job, router
from api.routes.jobs.public import job_public, queue_positions

ROUTE_MODULES = (creation, listing, lifecycle)
"""The route modules, in the order their routes are matched and documented."""

__all__ = ["ROUTE_MODULES", "JobIdPath", "OwnedJob", "job_public", "owned_job", "queue_positions", "router"]
