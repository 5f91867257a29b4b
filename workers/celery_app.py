"""The Celery app, configured from settings. Imports no torch or ray: the API enqueues through it."""

from __future__ import annotations

from celery import Celery
from celery.signals import setup_logging

from core import logging as logcontext
from core.config import settings

JOB_QUEUE = f"{settings.QUEUE_NAMESPACE}keel.jobs"
CONTROL_QUEUE = f"{settings.QUEUE_NAMESPACE}keel.control"
BROKER_POLL_S = 0.1
"""How often a worker looks for tasks on a polled broker (the embedded SQLAlchemy one; Redis pushes)."""

celery_app = Celery("keel", broker=settings.broker_url)
celery_app.conf.update(
    task_default_queue=JOB_QUEUE,
    task_routes={"keel.run_job": {"queue": JOB_QUEUE}, "keel.cancel_job": {"queue": CONTROL_QUEUE},
                 "keel.run_trainer": {"queue": JOB_QUEUE}},
    task_acks_late=True,  # a job task is acked only when it finishes: a dead worker's job is redelivered
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,  # a long job must not hold other jobs hostage in a prefetch buffer
    worker_redirect_stdouts=False,  # Ray's init fails on Celery's stdout logging proxy
    task_ignore_result=True,  # the database is the source of truth, not a result backend
    broker_connection_retry_on_startup=True,
    imports=("workers.tasks", "workers.trainers"),
)
if settings.broker_url.startswith(("redis", "rediss")):
    # Redis redelivers unacked tasks after this long: longer than any job, so only a lost worker
    # (not a long job) triggers redelivery. The embedded SQLAlchemy transport takes no such option.
    celery_app.conf.broker_transport_options = {"visibility_timeout": 12 * 3600}
elif settings.broker_url.startswith("sqla+"):
    # The embedded SQLAlchemy broker is polled, by default every second: a sent job waited up to 1 s
    # (0.5 on average) before the worker saw it. Polling its small SQLite table 10 times a second is
    # cheap. A class attribute: this transport hands every transport option to create_engine().
    from kombu.transport.sqlalchemy import Transport as _SqlaTransport

    _SqlaTransport.polling_interval = BROKER_POLL_S


@setup_logging.connect
def _keel_logging(loglevel: int | str | None = None, **_: object) -> None:
    """Keel's log format (`KEEL_LOG_FORMAT`) instead of Celery's: a receiver here makes Celery leave
    logging alone."""
    logcontext.configure(level=loglevel or None)
