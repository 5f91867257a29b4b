"""The app factory: routers, error handlers, request ids. Nothing else lives here."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute

from api import bodysize, docs, errors, metrics, middleware, streams
from api.openai import fine_tuning, graders, inference, trajectories
from api.routes import (
    checkpoints,
    console,
    events,
    files,
    forks,
    health,
    jobs,
    keys,
    manifests,
    models,
    secrets,
    tensorboard,
    trainer_events,
    trainers,
    webhooks,
)
from api.tinker import room as tinker_room
from core import logging as logcontext

DESCRIPTION = """Keel is an offline-RLHF training service: upload datasets, run SFT, reward-model,
reward-model distillation and PPO jobs, and follow them live.

## Authentication
Every `/v1` route takes a project API key as a bearer token. `keel up` prints the first key (and saves it
to `.keel/api_key`); `keel keys create --project NAME` makes more.

```
curl -H "Authorization: Bearer keel_..." http://127.0.0.1:8000/v1/files
```

A missing or revoked key is a `401` (revocation takes effect at once: every API process forgets its
cached keys when the revocation commits). Admin keys (`keel keys create --project NAME --admin`) also
manage the project's keys at `/v1/keys` (list, create, revoke); a project key gets `403` there. A key's
secret is shown once, when it is created. Every job records the key that created it (`created_by`).

## Limits
Each key has a budget of requests per minute, shared by every API process; every keyed answer carries
`X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` (seconds), and a request over the
budget is a `429` (`rate_limited`) with `Retry-After`. A key holds a limited number of event streams at
once (`429 too_many_streams` beyond). A request body larger than the deployment's JSON limit is a `413`
(`request_too_large`), answered before the body is read; uploads have their own, larger limit.

## Errors
Errors are [RFC 9457](https://www.rfc-editor.org/rfc/rfc9457) problem details with the media type
`application/problem+json`, plus Keel's machine-readable `code`, the offending request field `param`
(dotted, e.g. `method.hyperparameters.optim.lr`) and the `request_id` (also in the `X-Request-ID`
response header; send your own `X-Request-ID` to correlate logs).

```json
{"type": "/problems/not_found", "title": "Not Found", "status": 404, "code": "not_found",
 "detail": "No job with id 'job-123'.", "param": "job_id", "request_id": "req_5f0c..."}
```

A failed job's `error` (and its `job.error` event) has a stable `code` and a message. For system errors
(`internal_error`, `worker_lost`, ...) the message is generic and comes with an `error_id`: the details
stay in the deployment's logs under that id; quote it when reporting the problem.

## Pagination
List routes are cursor-paginated, newest first: `limit` (1-100) and `after` (the `last_id` of the page
you hold). A page is `{"object": "list", "data": [...], "has_more": true, "first_id": ..., "last_id": ...}`.

```
GET /v1/jobs?limit=20                          -> {"data": [...], "has_more": true, "last_id": "job-01jb8x..."}
GET /v1/jobs?limit=20&after=job-01jb8x...      -> the next 20, older
```

A job's event log pages oldest first by sequence number instead: `GET /v1/jobs/{job_id}/events?after=SEQ`.

## Idempotency
`POST` routes that create something accept an `Idempotency-Key` header (any unique string, e.g. a
UUID). Retrying with the same key and the same body returns the first response (with the header
`Idempotent-Replayed: true`) instead of acting twice; the same key with a different request is a `422`
(`idempotency_mismatch`). Keys are kept 24 hours. `POST /v1/keys` takes no
`Idempotency-Key`: a replay would have to store the new key's secret.

```
curl -X POST -H "Idempotency-Key: 5b0e4d1c-..." -H "Content-Type: application/json" \\
     -H "Authorization: Bearer keel_..." -d @job.json http://127.0.0.1:8000/v1/jobs
```

## Server-sent events
`GET /v1/jobs/{job_id}/events/stream` streams a job's events (`text/event-stream`) until it finishes:
`job.status`, `job.placement`, `job.metrics`, `job.samples`, `job.checkpoint`, `job.log`, `job.warning`,
`job.error`, `job.done`. Each
event's `id` is its sequence number; after a dropped connection, reconnect with the `Last-Event-ID`
header (browsers' `EventSource` does this itself) and the stream resumes with the next event, nothing
lost and nothing repeated. A comment line (`: ping`) keeps idle connections open every 15 s. The
SDK's `keel_client.stream_events()` reconnects for you; `keel jobs watch JOB` draws it as a progress bar.

```
curl -N -H "Authorization: Bearer keel_..." -H "Last-Event-ID: 41" \\
     http://127.0.0.1:8000/v1/jobs/job-01jb8x.../events/stream

id: 42
event: job.metrics
data: {"object":"job.event","seq":42,"type":"job.metrics","data":{"step":12,"total_steps":50,"values":{"actor/pg_loss":0.03}},"created_at":1767052800}
```
"""


def _operation_id(route: APIRoute) -> str:
    # Handler name = operationId = SDK method name.
    return route.name


@asynccontextmanager
async def _lifespan(app: FastAPI):
    yield
    await streams.shutdown()  # the live-event listener of this process


ROUTERS = (
    health.router,
    metrics.router,
    keys.router,
    files.router,
    jobs.router,
    forks.router,  # a job's fork and manifest: reproducible runs
    manifests.router,
    events.router,
    checkpoints.router,
    models.router,
    trainers.router,  # interactive trainers (docs/trainers.md)
    trainer_events.router,
    fine_tuning.router,  # OpenAI's fine-tuning API (docs/openai.md)
    graders.router,  # its alpha graders endpoints
    inference.router,  # OpenAI's chat completions and completions, answered by Ray Serve (docs/inference.md)
    trajectories.router,  # the recorded calls' outcomes, trained on by rollout.source trajectories
    webhooks.router,
    secrets.router,
    tensorboard.router,
    console.router,  # the web console at `/` (not in the OpenAPI document)
)
"""The app's routers in the order the OpenAPI document lists their paths."""


def create_app() -> FastAPI:
    logcontext.configure()
    app = FastAPI(title="Keel", version="0.1.0", description=DESCRIPTION,
                  generate_unique_id_function=_operation_id, docs_url=None, redoc_url=None,
                  lifespan=_lifespan)
    errors.install(app)
    docs.install(app, documented=ROUTERS)

    bodysize.install(app)  # innermost: a too-large body is refused before anything reads it
    # Outermost: request id, rate-limit headers and the metrics of every answer, 413s and 500s included.
    app.add_middleware(middleware.RequestEnvelope)

    # The jobs routes are tried first, as the busiest: a request is matched against every router
    # included before its own (FastAPI walks each one's routes). None of the routers before them
    # has a path under /v1/jobs, so no request is routed differently; the OpenAPI document lists
    # the paths in ROUTERS' order all the same (`docs.install`).
    app.include_router(jobs.router)
    for router in ROUTERS:
        if router is not jobs.router:
            app.include_router(router)
    for router in tinker_room.ROUTERS:  # Tinker's protocol under /api/v1 (docs/tinker.md); not in the document
        app.include_router(router)
    return app


app = create_app()
