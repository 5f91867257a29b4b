"""The job's side of the database while it runs: the `Reporter` that writes its event log, the
heartbeat, and the conditional status changes every other module goes through.

Everything here is fenced by the attempt number: a job re-queued after a lost worker gets a new
attempt, and writes from the old attempt (a zombie controller, a late heartbeat) are dropped. Writes
retry on connection errors with backoff; an event and the row changes it describes commit in one
transaction, and a retry after a commit whose answer was lost finds the event already there, so
nothing is ever written twice.

No torch, ray or engine imports: the API imports this module through `workers.dispatch`.
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Self, TypeVar

from sqlalchemy import func, or_, select, update
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from core import checkpoints
from core.clock import db_now, db_now_sql
from core.db import session_factory
from core.events import append_event, channel, event_payload, publish
from core.ids import new_id
from core.models import Checkpoint, Job, JobEvent
from workers import manifest as manifests

log = logging.getLogger(__name__)

ACTIVE = ("running", "cancelling", "pausing")
"""A worker owns the job and heartbeats it."""
TERMINAL = ("succeeded", "failed", "cancelled")
"""Never left again."""
DB_RETRY_BUDGET_S = 60.0
"""How long a write keeps retrying through connection errors before it gives up and raises."""
STOP_CACHE_S = 1.0
"""`should_stop` and `should_pause` re-read the job at most this often."""
HEARTBEAT_S = 5.0
"""Default interval of the controller's heartbeat writes (the service passes `WORKER_HEARTBEAT_S`)."""

T = TypeVar("T")


def _retryable(exc: DBAPIError) -> bool:
    return isinstance(exc, OperationalError | InterfaceError) or bool(exc.connection_invalidated)


def retry_db(fn: Callable[[], T], *, budget_s: float = DB_RETRY_BUDGET_S, what: str = "database write") -> T:
    """Call `fn` (one whole transaction) until it gets through a connection error, with exponential
    backoff from 0.1 s to 5 s, for at most `budget_s`; then the last error is raised."""
    deadline = time.monotonic() + budget_s
    delay = 0.1
    while True:
        try:
            return fn()
        except DBAPIError as exc:
            if not _retryable(exc) or time.monotonic() + delay > deadline:
                raise
            log.warning("%s failed (%s); retrying in %.1f s", what, exc.__class__.__name__, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def json_safe(value: Any) -> Any:
    """JSON-ready copy: non-finite floats become null (PostgreSQL's JSONB has no NaN), NUL characters
    in strings become U+FFFD (JSONB refuses them; sampled text can hold one, its token ids stay
    exact), numpy and torch scalars become Python numbers, tuples become lists."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {json_safe(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if hasattr(value, "item"):
        return json_safe(value.item())
    return json_safe(str(value))


def internal_roots() -> tuple[str, ...]:
    """The deployment's locations a tenant must never read in an event: KEEL_HOME, the artifact store
    (a directory or a remote URL), the model roots; longest first (the store usually sits in the home)."""
    from core.config import settings

    store = settings.storage_url.removeprefix("file://")
    local = [str(settings.home), *settings.model_roots] + ([store] if "://" not in store else [])
    found = {os.path.abspath(r).rstrip("/") for r in local if r}
    found |= {os.path.realpath(r).rstrip("/") for r in found}
    if "://" in store:  # a remote store's bucket and prefix are the deployment's too
        found.add(store.rstrip("/"))
    return tuple(sorted((r for r in found if r not in ("", "/")), key=len, reverse=True))


def scrub(value: Any, roots: Sequence[str]) -> Any:
    """`value` with every path under `roots` made relative to its root (`jobs/<id>/output`: the
    artifact's key, named by the job's id); a root alone becomes `.`. The net under every event a
    tenant reads: engine messages name artifacts by id already."""
    if isinstance(value, str):
        for root in roots:
            if root in value:
                value = value.replace(root + "/", "").replace(root, ".")
        return value
    if isinstance(value, Mapping):
        return {k: scrub(v, roots) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v, roots) for v in value]
    return value


def status_event(status: str) -> tuple[str, dict[str, Any]]:
    return "job.status", {"status": status}


def transition(job_id: str, to_status: str, *, expect: Sequence[str], where: Iterable[Any] = (),
               values: Mapping[str, Any] | None = None, before: Iterable[tuple[str, dict]] = (),
               after: Iterable[tuple[str, dict]] = (), then: Callable[[Session], None] | None = None,
               database_url: str | None = None) -> bool:
    """Move a job to `to_status` only if its status is in `expect` and `where` holds: one
    conditional UPDATE, so concurrent writers (tasks, sweepers, the API) never both win and a
    terminal state is never left. On success, in the same transaction: `then(db)`, the `before`
    events, `job.status`, the `after` events. Returns whether this call made the change."""
    before, after = list(before), list(after)

    def txn() -> bool:
        with session_factory(database_url)() as db:
            stmt = (update(Job).where(Job.id == job_id, Job.status.in_(list(expect)), *where)
                    .values(status=to_status, **dict(values or {}))
                    .execution_options(synchronize_session=False))
            if db.execute(stmt).rowcount != 1:
                db.rollback()
                return False
            if then is not None:
                then(db)
            roots = internal_roots()
            written = [append_event(db, job_id, kind, scrub(json_safe(data), roots), commit=False)
                       for kind, data in [*before, status_event(to_status), *after]]
            db.commit()
        for event in written:
            publish(event)
        return True

    return retry_db(txn, what=f"job {job_id} -> {to_status}")


class DBReporter:
    """`engine.runtime.reporting.Reporter` that writes the job's event log, progress and checkpoints.

    Picklable: it holds the job id, the database URL (and Redis URL for live fan-out) and opens its
    own connections lazily in whichever process it lands in (the Celery task, the Ray controller).
    With `attempt` set, writes are fenced: they land only while that attempt owns the job.
    """

    def __init__(self, job_id: str, database_url: str, *, redis_url: str | None = None,
                 attempt: int | None = None, stop_cache_s: float = STOP_CACHE_S,
                 storage_options: Mapping[str, Any] | None = None, heartbeat_s: float = HEARTBEAT_S,
                 hidden_roots: Sequence[str] | None = None) -> None:
        self.job_id = job_id
        self.hidden_roots = tuple(internal_roots() if hidden_roots is None else hidden_roots)
        """Directories no event names (`scrub`); taken where the reporter is made, whose settings are the
        deployment's (a Ray process that unpickles it may not have them)."""
        self.heartbeat_s = heartbeat_s
        """`heartbeat` writes at most this often."""
        self.database_url = database_url
        self.redis_url = redis_url or None
        self.attempt = attempt
        self.stop_cache_s = stop_cache_s
        self.storage_options = dict(storage_options or {})
        """fsspec options of a remote artifact store (to size checkpoints recorded by URL)."""
        self._init_local()

    def _init_local(self) -> None:
        self._lock = threading.Lock()
        self._stop_checked = -math.inf
        self._stopping = False
        self._pausing = False
        self._local_stop: threading.Event | None = None
        self._rate_origin: tuple[int, float] | None = None
        self._redis = None
        self._beat_at = -math.inf

    _STATE = ("job_id", "database_url", "redis_url", "attempt", "stop_cache_s", "storage_options", "heartbeat_s",
              "hidden_roots")

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._STATE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_local()

    def bind_stop_event(self, event: threading.Event) -> None:
        """`should_stop` also turns true when `event` is set (this process only: not pickled)."""
        self._local_stop = event

    # --- Reporter ---------------------------------------------------------------------------------

    def metrics(self, step: int, values: Mapping[str, float], *, total_steps: int | None = None,
                epoch: int | None = None) -> None:
        values = json_safe(dict(values))
        data = {"step": step, "values": values, "total_steps": total_steps, "epoch": epoch}

        def apply(db: Session, job: Any) -> bool:
            done = (job.progress or {}).get("step")
            if isinstance(done, int) and step <= done:
                # A step re-run after a resume from an earlier checkpoint: already in the log.
                log.info("job %s: step %s already reported, not repeated", self.job_id, step)
                return False
            progress = {"step": step, "total_steps": total_steps, "epoch": epoch,
                        "seconds_remaining": self._seconds_remaining(step, total_steps, time.monotonic())}
            db.execute(update(Job).where(Job.id == self.job_id).values(progress=progress, latest_metrics=values)
                       .execution_options(synchronize_session=False))
            return True

        self._append("job.metrics", data, apply)

    def checkpoint(self, step: int, path: str, metrics: Mapping[str, float]) -> None:
        checkpoint_id = new_id("ckpt")
        metrics = json_safe(dict(metrics))
        size = _tree_bytes(path, self.storage_options)

        doomed: list[str] = []

        def apply(db: Session, job: Any) -> bool:
            if db.scalar(select(Checkpoint.id).where(Checkpoint.job_id == self.job_id, Checkpoint.step == step)):
                return False
            db.add(Checkpoint(id=checkpoint_id, job_id=self.job_id, project_id=job.project_id, step=step,
                              metrics=metrics, path=str(path), bytes=size))
            # Retention (`trainer.max_*_ckpt_to_keep`): older rows go in this transaction ...
            spec = db.scalar(select(Job.spec).where(Job.id == self.job_id))
            doomed[:] = checkpoints.prune(db, self.job_id, job.project_id, str(path), spec)
            return True

        self._append("job.checkpoint", {"checkpoint_id": checkpoint_id, "step": step, "metrics": metrics}, apply)
        for location in doomed:  # ... and their files once it committed
            checkpoints.remove_tree(location, self.storage_options)

    def log(self, message: str) -> None:
        self._append("job.log", {"message": str(message)})

    def warning(self, code: str, message: str, data: Mapping[str, Any] | None = None) -> None:
        self._append("job.warning", {"code": code, "message": str(message), "data": json_safe(dict(data or {}))})

    def placement(self, workers: Sequence[Mapping[str, Any]]) -> None:
        """`job.placement`, and the same list on the job row (`GET /v1/jobs/{id}` shows it)."""
        workers = [json_safe(dict(w)) for w in workers]

        def apply(db: Session, job: Any) -> bool:
            db.execute(update(Job).where(Job.id == self.job_id).values(placement=workers)
                       .execution_options(synchronize_session=False))
            return True

        self._append("job.placement", {"workers": workers}, apply)

    def samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """`job.samples`: the method's few decoded rollouts of a step (the console's samples table)."""
        self._append("job.samples", {"step": int(step), "rows": [json_safe(dict(r)) for r in rows]})

    def manifest(self, data: Mapping[str, Any]) -> None:
        """The attempt's manifest on the job row (`workers.manifest`), fenced like every write."""
        retry_db(lambda: manifests.record(self._session, self.job_id, data, attempt=self.attempt, owns=self._owns,
                                          clean=lambda d: scrub(json_safe(d), self.hidden_roots)),
                 what=f"job {self.job_id} manifest")

    def heartbeat(self, step: int | None = None) -> None:
        """The controller is alive and its loop on time: `controller_heartbeat_at = now()` on the
        database's clock, at most every `heartbeat_s`, while this attempt owns the job. Never raises:
        a missed beat is made up by the next one."""
        now = time.monotonic()
        with self._lock:
            if now - self._beat_at < self.heartbeat_s:
                return
            self._beat_at = now
        where = [Job.id == self.job_id, Job.status.in_(ACTIVE)]
        if self.attempt is not None:
            where.append(Job.attempts == self.attempt)
        try:
            with self._session() as db:
                db.execute(update(Job).where(*where).values(controller_heartbeat_at=db_now_sql())
                           .execution_options(synchronize_session=False))
                db.commit()
        except DBAPIError as exc:
            log.warning("job %s: controller heartbeat failed: %s", self.job_id, exc.__class__.__name__)

    def should_stop(self) -> bool:
        """True once the job is `cancelling`, or (with `attempt`) no longer this attempt's to run."""
        if self._local_stop is not None and self._local_stop.is_set():
            return True
        self._check_status()
        return self._stopping

    def should_pause(self) -> bool:
        """True once the job is `pausing` (and still this attempt's)."""
        self._check_status()
        return self._pausing and not self._stopping

    def _check_status(self) -> None:
        """Re-read the job's status into the stop and pause answers, at most every `stop_cache_s`."""
        with self._lock:
            if time.monotonic() - self._stop_checked < self.stop_cache_s:
                return
            try:
                with self._session() as db:
                    row = db.execute(select(Job.status, Job.attempts).where(Job.id == self.job_id)).one_or_none()
            except DBAPIError as exc:  # a blip must not stop a run: keep the last answers
                log.warning("job %s: stop check failed: %s", self.job_id, exc.__class__.__name__)
                return
            self._stopping = row is None or row.status == "cancelling" or not self._owns(row)
            self._pausing = row is not None and row.status == "pausing"
            self._stop_checked = time.monotonic()

    # --- plumbing ---------------------------------------------------------------------------------

    def _session(self) -> Session:
        return session_factory(self.database_url)()

    def _owns(self, row: Any) -> bool:
        if self.attempt is None:
            return row.status not in TERMINAL
        return row.attempts == self.attempt and row.status in ACTIVE

    def _seconds_remaining(self, step: int, total_steps: int | None, now: float) -> float | None:
        """From the pace since the first step this reporter wrote (None until there are two)."""
        if self._rate_origin is None:
            self._rate_origin = (step, now)
            return None
        first_step, first_time = self._rate_origin
        if not total_steps or step <= first_step:
            return None
        per_step = (now - first_time) / (step - first_step)
        return round(per_step * max(total_steps - step, 0), 1)

    def _append(self, kind: str, data: dict[str, Any],
                apply: Callable[[Session, Any], bool] | None = None) -> None:
        """Append one event (and `apply`'s row changes) in one fenced transaction."""
        attempted: list[int] = []
        data = scrub(data, self.hidden_roots)

        def txn() -> None:
            with self._session() as db:
                if attempted and _landed(db, self.job_id, attempted[-1], kind, data):
                    return  # the previous try committed; only its answer was lost
                job = db.execute(select(Job.status, Job.attempts, Job.progress, Job.project_id)
                                 .where(Job.id == self.job_id).with_for_update()).one_or_none()
                if job is None or not self._owns(job):
                    log.info("job %s: %s from a stale attempt dropped", self.job_id, kind)
                    db.rollback()
                    return
                if apply is not None and not apply(db, job):
                    db.rollback()
                    return
                event = append_event(db, self.job_id, kind, data, commit=False)
                attempted.append(event.seq)
                db.commit()
            self._publish(event)

        retry_db(txn, what=f"job {self.job_id} {kind}")

    def _publish(self, event: JobEvent) -> None:
        """Best effort, like `core.events.publish`, with this reporter's Redis (it may run where the
        service's settings are not)."""
        if not self.redis_url:
            return
        try:
            if self._redis is None:
                import redis

                self._redis = redis.Redis.from_url(self.redis_url, socket_timeout=2, socket_connect_timeout=2)
            self._redis.publish(channel(event.job_id), json.dumps(event_payload(event)))
        except Exception as exc:  # noqa: BLE001 - the row is committed; live readers re-read the table
            log.warning("event publish failed for %s seq %s: %s", event.job_id, event.seq, exc)


def _landed(db: Session, job_id: str, seq: int, kind: str, data: dict[str, Any]) -> bool:
    event = db.scalar(select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.seq == seq))
    return event is not None and event.type == kind and event.data == data


def _tree_bytes(path: str, storage_options: Mapping[str, Any] | None = None) -> int:
    if "://" in path and not path.startswith("file://"):  # a remote store (`engine.runtime.artifacts`)
        import fsspec

        try:
            fs, root = fsspec.core.url_to_fs(path, **dict(storage_options or {}))
            fs.invalidate_cache(root)
            return sum(int(info.get("size") or 0) for info in fs.find(root, detail=True).values())
        except Exception as exc:  # noqa: BLE001 - a size is not worth failing the job's report over
            log.warning("could not size checkpoint %s: %s", path, exc)
            return 0
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


class Heartbeat:
    """Bumps `job.heartbeat_at` (the database's clock) every `interval_s` from a daemon thread while
    attempt `attempt` owns the job; calls `on_lost()` once (and stops) when it no longer does.

    With `controller_timeout_s`, liveness also covers the job's Ray controller: once the controller
    has beaten (`controller_heartbeat_at`, `DBReporter.heartbeat`), a controller silent that long
    stops these beats too, so a frozen controller's job goes stale and a sweeper re-queues it, while
    a dead worker process still goes stale however alive its controller is."""

    def __init__(self, job_id: str, attempt: int, interval_s: float, on_lost: Callable[[], None],
                 database_url: str | None = None, controller_timeout_s: float | None = None) -> None:
        self.job_id, self.attempt, self.interval_s = job_id, attempt, interval_s
        self.on_lost, self.database_url = on_lost, database_url
        self.controller_timeout_s = controller_timeout_s
        self._stop = threading.Event()
        # In a copy of the caller's context: its log lines carry the job id (core.logging).
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,), daemon=True,
                                        name=f"keel-heartbeat-{job_id}")

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def beat(self) -> bool:
        """One heartbeat; False when this attempt no longer owns the job."""
        owned = [Job.id == self.job_id, Job.attempts == self.attempt, Job.status.in_(ACTIVE)]
        with session_factory(self.database_url)() as db:
            gate = []
            if self.controller_timeout_s is not None:
                cutoff = db_now(db) - timedelta(seconds=self.controller_timeout_s)
                gate = [or_(Job.controller_heartbeat_at.is_(None), Job.controller_heartbeat_at >= cutoff)]
            n = db.execute(update(Job).where(*owned, *gate).values(heartbeat_at=db_now_sql())
                           .execution_options(synchronize_session=False)).rowcount
            if n == 0 and gate and db.scalar(select(func.count()).select_from(Job).where(*owned)):
                log.warning("job %s: its controller has been silent for over %.0f s; heartbeat withheld",
                            self.job_id, self.controller_timeout_s)
                n = 1
            db.commit()
        return n == 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                owned = self.beat()
            except DBAPIError as exc:  # a blip: the next beat may get through before the timeout
                log.warning("job %s: heartbeat failed: %s", self.job_id, exc.__class__.__name__)
                continue
            if not owned:
                log.warning("job %s: attempt %s no longer owns the job; stopping it", self.job_id, self.attempt)
                self.on_lost()
                return
