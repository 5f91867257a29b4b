"""End to end through a real Celery worker (its webhook and integration threads started on
`worker_ready`) and a real local Ray: an SFT job of the demo model with a `tensorboard` integration,
and a webhook that hears it succeed."""

from __future__ import annotations

import json
import secrets

import pytest
from factories import TINY_SFT, add_file, add_job, events_of, get_job, wait_for
from sqlalchemy import update

from core.db import session_scope
from core.integrations import tensorboard_key
from core.models import Job
from core.security import create_api_key, get_or_create_project
from core.storage import get_storage
from tests.workers.test_webhooks import Receiver
from workers import dispatch
from workers.reporter import TERMINAL

pytestmark = pytest.mark.slow


def test_worker_sends_the_webhook_and_mirrors_metrics_to_tensorboard(celery_worker, demo_assets, client):
    with session_scope() as db:
        project, _ = get_or_create_project(db, f"e2e-intg-{secrets.token_hex(4)}")
        project_id, key = project.id, create_api_key(db, project)
    auth = {"Authorization": f"Bearer {key}"}
    with Receiver([200]) as receiver:
        hook = client.post("/v1/webhooks", headers=auth, json={"url": receiver.url, "event_types": ["job.succeeded"]})
        assert hook.status_code == 201, hook.text
        train = add_file(project_id, demo_assets["sft_train"])
        job_id = add_job(project_id, train, model=demo_assets["model"], hyperparameters=TINY_SFT)
        with session_scope() as db:
            job = db.get(Job, job_id)
            db.execute(update(Job).where(Job.id == job_id)
                       .values(spec={**job.spec, "integrations": [{"type": "tensorboard"}]}))
        dispatch.enqueue_job(job_id)
        job = wait_for(lambda: (j := get_job(job_id)).status in TERMINAL and j, 300, what="the job to finish")
        assert job.status == "succeeded", job.error
        wait_for(lambda: receiver.requests, 60, what="the webhook")
    body = json.loads(receiver.requests[0]["body"])
    assert body["type"] == "job.succeeded" and body["data"]["job_id"] == job_id

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps = {e.data["step"] for e in events_of(job_id) if e.type == "job.metrics"}

    def mirrored():
        logdir = get_storage().local_path(tensorboard_key(job_id))
        if not logdir.is_dir():
            return False
        accumulator = EventAccumulator(str(logdir))
        accumulator.Reload()
        tags = accumulator.Tags()["scalars"]
        return tags and {s.step for t in tags for s in accumulator.Scalars(t)} == steps

    assert steps
    wait_for(mirrored, 60, what="every metric step in TensorBoard")
