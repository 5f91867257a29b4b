"""Experiment trackers (W&B, TensorBoard, MLflow) fed from the job event log, on the worker side.

A thread of each worker's main process (`workers.tasks` starts it next to the sweeper) tails the
`job.metrics` events of jobs whose spec has `integrations`, and logs every metric at its step to
each tracker; `job.done` finishes the runs. The training loop never talks to a tracker, so a slow or
unreachable one cannot block a step. One worker at a time mirrors a job: it holds a lease on the job's
cursor (`event_cursor`, consumer `integrations`), renewed each pass; if it dies another takes over
from the cursor (W&B resumes the run by id, MLflow by the run id kept in the cursor's state).

Trackers are imported here, lazily, only when a job uses them (the API never imports them).
Credentials are project secrets (`core.integrations.SECRET_NAMES`), never job fields; a tracker that
fails is dropped for that job with a `job.warning` (`integration_failed`) whose message holds no secret.
TensorBoard event files go to the artifact store at `jobs/<job>/tensorboard` (`GET
/v1/jobs/{job_id}/tensorboard`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select, update

from core.clock import db_now
from core.config import settings
from core.db import session_factory
from core.events import append_event
from core.integrations import SECRET_NAMES, check_secret, check_tracking_uri, project_secrets, tensorboard_key
from core.models import EventCursor, Job, JobEvent
from core.storage import get_storage
from workers.webhooks import _insert

log = logging.getLogger(__name__)

CONSUMER = "integrations"
LEASE_S = 60.0
_JOBS_PER_PASS = 50
_EVENTS_PER_PASS = 1000


def _numbers(values: Any) -> dict[str, float]:
    if not isinstance(values, dict):
        return {}
    return {str(k): float(v) for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)}


class WandbSink:
    def __init__(self, job_id: str, spec: dict[str, Any], secrets: dict[str, str], workdir: Path) -> None:
        import wandb

        key = secrets.get("WANDB_API_KEY")
        mode = os.environ.get("WANDB_MODE") or ("online" if key else "offline")
        if not key and mode != "offline":
            raise RuntimeError("no project secret WANDB_API_KEY")
        workdir.mkdir(parents=True, exist_ok=True)
        options: dict[str, Any] = {"mode": mode, "silent": True, "x_disable_stats": True, "api_key": key or None}
        if secrets.get("WANDB_BASE_URL"):
            check_secret("WANDB_BASE_URL", secrets["WANDB_BASE_URL"])  # again now: DNS may have changed
            options["base_url"] = secrets["WANDB_BASE_URL"]
        # The run id is the job's, so a worker that takes over resumes the same run.
        self.run = wandb.init(project=spec["project"], entity=spec.get("entity"), name=spec.get("name") or job_id,
                              tags=spec.get("tags") or None, id=job_id.replace("-", ""), resume="allow",
                              dir=str(workdir), reinit="create_new", config={"keel_job_id": job_id},
                              settings=wandb.Settings(**options))

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def finish(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "succeeded" else 1)


class TensorBoardSink:
    def __init__(self, job_id: str, spec: dict[str, Any], secrets: dict[str, str], workdir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter  # the worker has torch; it needs `tensorboard`

        storage = get_storage()
        self.key = tensorboard_key(job_id)
        # A local store gets the files live; a remote one gets them when the job is done.
        self.logdir = storage.local_path(self.key) if storage.is_local else workdir / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.logdir), flush_secs=5)

    def log(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, global_step=step)
        self.writer.flush()

    def finish(self, status: str) -> None:
        self.writer.close()
        storage = get_storage()
        if not storage.is_local:
            for path in sorted(self.logdir.rglob("*")):
                if path.is_file():
                    with storage.writer(f"{self.key}/{path.relative_to(self.logdir).as_posix()}") as out:
                        out.write(path.read_bytes())


class MLflowSink:
    def __init__(self, job_id: str, spec: dict[str, Any], secrets: dict[str, str], workdir: Path,
                 state: dict[str, Any]) -> None:
        import mlflow

        self.secrets = secrets
        check_tracking_uri(spec["tracking_uri"])  # again at connect time: DNS may have changed since creation
        with self._credentials():
            self.client = mlflow.MlflowClient(tracking_uri=spec["tracking_uri"])
            run_id = state.get("mlflow_run_id")
            if run_id is None:
                experiment = self.client.get_experiment_by_name(spec["experiment"])
                experiment_id = (experiment.experiment_id if experiment is not None
                                 else self.client.create_experiment(spec["experiment"]))
                run_id = self.client.create_run(experiment_id, run_name=job_id,
                                                tags={"keel.job_id": job_id}).info.run_id
                state["mlflow_run_id"] = run_id
        self.run_id = run_id

    @contextmanager
    def _credentials(self):
        """MLflow reads credentials from the environment; only this thread uses MLflow, so they are set
        around each call and removed after (never left for another project's job)."""
        names = SECRET_NAMES["mlflow"]
        saved = {n: os.environ.get(n) for n in names}
        try:
            for name in names:
                if name in self.secrets:
                    os.environ[name] = self.secrets[name]
                else:
                    os.environ.pop(name, None)
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def log(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now_ms = int(time.time() * 1000)
        metrics = [Metric(key=_mlflow_key(k), value=v, timestamp=now_ms, step=step) for k, v in values.items()]
        with self._credentials():
            for i in range(0, len(metrics), 1000):  # MLflow's batch limit
                self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def finish(self, status: str) -> None:
        with self._credentials():
            self.client.set_terminated(self.run_id, {"succeeded": "FINISHED", "cancelled": "KILLED"}.get(status, "FAILED"))


def _mlflow_key(name: str) -> str:
    # MLflow allows letters, digits, _ - . / and space; VERL names (`actor/pg_loss`) pass unchanged.
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in name)


class IntegrationMirror(threading.Thread):
    """Mirror the metrics of jobs with integrations every `interval_s`, until `stop()`."""

    def __init__(self, interval_s: float | None = None) -> None:
        super().__init__(daemon=True, name="keel-integrations")
        self.interval_s = settings.OUTBOX_POLL_S if interval_s is None else interval_s
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.workdir = settings.home / "integrations"
        self._sinks: dict[str, dict[str, Any]] = {}
        self._stop_event = threading.Event()

    # -- one pass ----------------------------------------------------------------------------------

    def run_once(self) -> int:
        """Mirror what is new; returns how many events it read."""
        with session_factory()() as db:
            now = db_now(db)
            if self._sinks:  # jobs this mirror holds stay its own while they are quiet (a long step)
                db.execute(update(EventCursor).where(EventCursor.consumer == CONSUMER, EventCursor.owner == self.owner,
                                                     EventCursor.job_id.in_(list(self._sinks)))
                           .values(lease_until=now + timedelta(seconds=LEASE_S))
                           .execution_options(synchronize_session=False))
            free = or_(EventCursor.owner.is_(None), EventCursor.owner == self.owner, EventCursor.lease_until < now)
            rows = db.execute(
                select(Job.id, Job.project_id, Job.spec, Job.last_event_seq, EventCursor.last_seq, EventCursor.done)
                .outerjoin(EventCursor, (EventCursor.job_id == Job.id) & (EventCursor.consumer == CONSUMER))
                .where(or_(EventCursor.job_id.is_(None),
                           (EventCursor.done.is_(False)) & (Job.last_event_seq > EventCursor.last_seq) & free))
                .order_by(Job.created_at).limit(_JOBS_PER_PASS)).all()
            for row in rows:
                if row.last_seq is None and not (row.spec or {}).get("integrations"):
                    # Never looked at again.
                    db.execute(_insert(db, EventCursor).values(consumer=CONSUMER, job_id=row.id, last_seq=0,
                                                               done=True, state={}).on_conflict_do_nothing())
            db.commit()
        read = 0
        for row in rows:
            if (row.spec or {}).get("integrations"):
                read += self._mirror(row.id, row.project_id, row.spec["integrations"])
        return read

    def _claim(self, job_id: str) -> dict[str, Any] | None:
        """This mirror's lease on the job's cursor; the cursor row, or None when another worker holds it."""
        with session_factory()() as db:
            now = db_now(db)
            db.execute(_insert(db, EventCursor).values(consumer=CONSUMER, job_id=job_id, last_seq=0, done=False,
                                                       state={}).on_conflict_do_nothing())
            won = db.execute(update(EventCursor).where(
                EventCursor.consumer == CONSUMER, EventCursor.job_id == job_id, EventCursor.done.is_(False),
                or_(EventCursor.owner.is_(None), EventCursor.owner == self.owner, EventCursor.lease_until < now))
                .values(owner=self.owner, lease_until=now + timedelta(seconds=LEASE_S))
                .returning(EventCursor.last_seq, EventCursor.state)).one_or_none()
            db.commit()
        return None if won is None else {"last_seq": won.last_seq, "state": dict(won.state or {})}

    def _mirror(self, job_id: str, project_id: str, integrations: list[dict[str, Any]]) -> int:
        cursor = self._claim(job_id)
        if cursor is None:
            self._sinks.pop(job_id, None)
            return 0
        state = cursor["state"]
        with session_factory()() as db:
            # Every event up to the job's counter is committed (it is bumped in the event's transaction).
            head = db.scalar(select(Job.last_event_seq).where(Job.id == job_id)) or 0
            events = list(db.scalars(select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.seq > cursor["last_seq"],
                                                            JobEvent.seq <= head,
                                                            JobEvent.type.in_(("job.metrics", "job.done")))
                                     .order_by(JobEvent.seq).limit(_EVENTS_PER_PASS)))
        done = False
        last = head if len(events) < _EVENTS_PER_PASS else events[-1].seq
        sinks = self._sinks.get(job_id)
        if sinks is None and events:  # trackers start with the job's first metrics, not while it waits
            sinks = self._sinks[job_id] = self._open(job_id, project_id, integrations, state)
        for event in events:
            if event.type == "job.metrics":
                values, step = _numbers((event.data or {}).get("values")), (event.data or {}).get("step")
                if values and isinstance(step, int):
                    self._each(job_id, sinks, state, "log", step, values)
            else:
                self._each(job_id, sinks, state, "finish", str((event.data or {}).get("status")))
                done, last = True, event.seq
                break
        with session_factory()() as db:
            db.execute(update(EventCursor).where(EventCursor.consumer == CONSUMER, EventCursor.job_id == job_id,
                                                 EventCursor.owner == self.owner)
                       .values(last_seq=last, done=done, state=state, owner=None if done else self.owner)
                       .execution_options(synchronize_session=False))
            db.commit()
        if done:
            self._sinks.pop(job_id, None)
        return len(events)

    def _open(self, job_id: str, project_id: str, integrations: list[dict[str, Any]],
              state: dict[str, Any]) -> dict[str, Any]:
        names = tuple(n for i in integrations for n in SECRET_NAMES.get(i["type"], ()))
        with session_factory()() as db:
            secrets = project_secrets(db, project_id, names) if names else {}
        workdir = self.workdir / job_id
        sinks: dict[str, Any] = {}
        for integration in integrations:
            kind = integration["type"]
            if kind in state.get("failed", []):
                continue
            try:
                if kind == "wandb":
                    sinks[kind] = WandbSink(job_id, integration["wandb"], secrets, workdir)
                elif kind == "tensorboard":
                    sinks[kind] = TensorBoardSink(job_id, integration, secrets, workdir)
                elif kind == "mlflow":
                    sinks[kind] = MLflowSink(job_id, integration["mlflow"], secrets, workdir, state)
            except Exception as exc:  # noqa: BLE001 - a tracker that cannot start is dropped, the rest go on
                self._failed(job_id, kind, exc, state)
        return sinks

    def _each(self, job_id: str, sinks: dict[str, Any], state: dict[str, Any], method: str, *args: Any) -> None:
        for kind, sink in list(sinks.items()):
            try:
                getattr(sink, method)(*args)
            except Exception as exc:  # noqa: BLE001 - see _open
                sinks.pop(kind)
                self._failed(job_id, kind, exc, state)

    def _failed(self, job_id: str, kind: str, exc: BaseException, state: dict[str, Any]) -> None:
        state.setdefault("failed", []).append(kind)
        # The exception's text may quote a URL or a server's answer, never our secrets; still, tenants
        # get the exception's type only, and the deployment's log the rest.
        log.warning("integration %s of job %s failed: %r", kind, job_id, exc)
        with session_factory()() as db:
            append_event(db, job_id, "job.warning", {
                "code": "integration_failed",
                "message": f"the {kind} integration stopped: {exc.__class__.__name__}; metrics are no longer "
                           f"mirrored to it", "data": {"integration": kind}})

    # -- the thread --------------------------------------------------------------------------------

    def run(self) -> None:
        log.info("integration mirror started (every %.1f s)", self.interval_s)
        while not self._stop_event.is_set():
            try:
                busy = self.run_once()
            except Exception:  # the database may be away: keep going
                log.exception("integration pass failed")
                busy = 0
            if self._stop_event.wait(0 if busy else self.interval_s):
                break

    def stop(self, timeout: float = 10.0) -> None:
        self._stop_event.set()
        self.join(timeout)
