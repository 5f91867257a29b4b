"""Live job events: one listener per API process fans out to every subscriber of a job.

With `settings.REDIS_URL`, a single background task per process (per event loop) holds a Redis
pattern subscription to `keel:job:*` (core.events publishes each committed event there) and pushes
payloads into per-subscriber asyncio queues. Without Redis, one shared DB poller per process reads
new events of the jobs that have subscribers, once per job, and pushes them the same way. With Redis
the same poller runs rarely, as a reconciler: a publish lost in transit (Redis restarting, a writer
that could not reach it) is still delivered within `RECONCILE_INTERVAL_S`.

Subscribers never poll. `follow()` subscribes first, then replays the log from the database after
the client's cursor, then streams live; a payload whose `seq` is not the next one (a gap) or a
resync marker makes it re-read the database after its cursor, and anything at or below the cursor
is dropped, so nothing is lost or repeated.

A stream ends when its API key is revoked (`until_revoked`, watched by `api.ratelimit.LeasedStream`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from anyio import to_thread
from sqlalchemy import and_, or_, select

from core import key_cache
from core.config import settings
from core.db import get_engine, session_factory
from core.events import CHANNEL_PREFIX, event_payload, read_events
from core.models import ApiKey, Job, JobEvent

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.5
"""Without Redis: how often the shared poller looks for new events."""
RECONCILE_INTERVAL_S = 5.0
"""With Redis: how often the poller catches publishes that never arrived."""
READY_TIMEOUT_S = 2.0
"""How long a new subscriber waits for the Redis subscription to be confirmed."""
TERMINAL_GRACE_S = 2.0
"""A finished job whose `job.done` is not written yet: how long to wait for it before closing."""
QUEUE_SIZE = 1000
_PAGE = 500
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})

RESYNC: dict[str, Any] = {"resync": True}
"""Queue marker: re-read the database after your cursor."""


class Subscription:
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)

    def push(self, payload: dict[str, Any]) -> None:
        try:
            self.queue.put_nowait(payload)
        except asyncio.QueueFull:  # a slow client: drop the backlog, it re-reads the database instead
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(RESYNC)


class Hub:
    """The per-process fan-out: subscribers by job id, fed by one listener task."""

    def __init__(self) -> None:
        self.redis = bool(settings.REDIS_URL)
        self._subs: dict[str, set[Subscription]] = {}
        self._seen: dict[str, int] = {}
        """Per job: the highest seq pushed (from Redis or the poller); the poller reads after it."""
        self._ready = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    def _start(self) -> None:
        if self._tasks:
            return
        interval = RECONCILE_INTERVAL_S if self.redis else POLL_INTERVAL_S
        self._tasks.append(asyncio.create_task(self._poll(interval), name="keel-stream-poller"))
        if self.redis:
            self._tasks.append(asyncio.create_task(self._listen(), name="keel-stream-redis"))
        else:
            self._ready.set()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks.clear()

    def subscriber_count(self, job_id: str | None = None) -> int:
        if job_id is not None:
            return len(self._subs.get(job_id, ()))
        return sum(len(s) for s in self._subs.values())

    @contextlib.asynccontextmanager
    async def subscribe(self, job_id: str) -> AsyncIterator[Subscription]:
        self._start()
        sub = Subscription(job_id)
        first = job_id not in self._subs
        self._subs.setdefault(job_id, set()).add(sub)
        try:
            if first:
                # Events up to here are the subscribers' replay; the poller delivers anything after.
                last = await to_thread.run_sync(_last_seq, job_id)
                self._seen[job_id] = max(self._seen.get(job_id, 0), last)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), READY_TIMEOUT_S)
            yield sub
        finally:
            subs = self._subs.get(job_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[job_id]
                    self._seen.pop(job_id, None)

    def dispatch(self, job_id: str, payload: dict[str, Any]) -> None:
        subs = self._subs.get(job_id)
        if not subs:
            return
        seq = payload.get("seq")
        if isinstance(seq, int):
            self._seen[job_id] = max(self._seen.get(job_id, 0), seq)
        for sub in list(subs):
            sub.push(payload)

    def _resync_all(self) -> None:
        for subs in self._subs.values():
            for sub in subs:
                sub.push(RESYNC)

    async def _poll(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            if not self._subs:
                continue
            try:
                found = await to_thread.run_sync(_read_new, dict(self._seen))
            except Exception as exc:  # noqa: BLE001 - a database hiccup: try again next round
                log.warning("event poller: %s", exc)
                continue
            for job_id, payload in found:
                self.dispatch(job_id, payload)

    async def _listen(self) -> None:
        import redis.asyncio as aioredis

        backoff, connected_before = 0.2, False
        while True:
            client = aioredis.Redis.from_url(settings.REDIS_URL, health_check_interval=30)
            pubsub = client.pubsub()
            try:
                await pubsub.psubscribe(CHANNEL_PREFIX + "*")
                while (await pubsub.get_message(timeout=5.0) or {}).get("type") != "psubscribe":
                    pass
                self._ready.set()
                if connected_before:  # messages published while we were away are gone: re-read
                    self._resync_all()
                connected_before, backoff = True, 0.2
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=30.0)
                    if message is None or message.get("type") != "pmessage":
                        continue
                    channel = message["channel"]
                    job_id = (channel.decode() if isinstance(channel, bytes) else channel)[len(CHANNEL_PREFIX):]
                    if job_id not in self._subs:  # every job's events reach every process: most are not ours
                        continue
                    try:
                        payload = json.loads(message["data"])
                    except ValueError:
                        continue
                    self.dispatch(job_id, payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any Redis failure: reconnect with backoff
                self._ready.clear()
                log.warning("event listener lost Redis (%s); retrying in %.1f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                    await client.aclose()


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = weakref.WeakKeyDictionary()


def get_hub() -> Hub:
    """The hub of the running event loop: one per API process (a test server's loop gets its own)."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = Hub()
    return hub


async def shutdown() -> None:
    """Stop this loop's listener (the app's lifespan calls it)."""
    hub = _hubs.pop(asyncio.get_running_loop(), None)
    if hub is not None:
        await hub.close()


# -- database reads (run in worker threads) ---------------------------------------------------------

def _last_seq(job_id: str) -> int:
    with session_factory()() as db:
        return db.scalar(select(Job.last_event_seq).where(Job.id == job_id)) or 0


def _read_new(seen: dict[str, int]) -> list[tuple[str, dict[str, Any]]]:
    """Events after `seen[job]` for the jobs whose counter moved past it: two queries for all jobs."""
    with session_factory()() as db:
        moved = {job_id: seen[job_id] for job_id, last in
                 db.execute(select(Job.id, Job.last_event_seq).where(Job.id.in_(list(seen))))
                 if last > seen[job_id]}
        if not moved:
            return []
        rows = db.scalars(select(JobEvent).where(or_(*(and_(JobEvent.job_id == j, JobEvent.seq > s)
                                                        for j, s in moved.items())))
                          .order_by(JobEvent.job_id, JobEvent.seq).limit(_PAGE * len(moved)))
        return [(e.job_id, event_payload(e)) for e in rows]


def _read_after(job_id: str, after: int) -> list[dict[str, Any]]:
    with session_factory()() as db:
        return [event_payload(e) for e in read_events(db, job_id, after=after, limit=_PAGE)]


def _job_state(job_id: str) -> tuple[str | None, int | None]:
    """(status, seq of job.done or None)."""
    with session_factory()() as db:
        status = db.scalar(select(Job.status).where(Job.id == job_id))
        done = db.scalar(select(JobEvent.seq).where(JobEvent.job_id == job_id, JobEvent.type == "job.done")
                         .order_by(JobEvent.seq.desc()).limit(1))
        return status, done


# -- one subscriber ---------------------------------------------------------------------------------

def ping_interval() -> float:
    """Seconds between keep-alive comments on an idle stream: FastAPI's own SSE keep-alive interval."""
    from fastapi import routing

    return routing._PING_INTERVAL


async def follow(job_id: str, after: int = 0, *, ping_s: float | None = None) -> AsyncIterator[dict[str, Any] | None]:
    """The job's event payloads after `after`, in seq order without gaps or repeats, replayed then live;
    ends after `job.done` (or at once if the client already has it). With `ping_s`, a live wait that
    long yields None (time for a keep-alive)."""
    async with get_hub().subscribe(job_id) as sub:
        cursor = after

        async def reread() -> AsyncIterator[dict[str, Any]]:
            nonlocal cursor
            while True:
                page = await to_thread.run_sync(_read_after, job_id, cursor)
                for payload in page:
                    cursor = payload["seq"]
                    yield payload
                if len(page) < _PAGE:
                    return

        async with contextlib.aclosing(reread()) as replay:
            async for payload in replay:
                yield payload
                if payload["type"] == "job.done":
                    return
        status, done_seq = await to_thread.run_sync(_job_state, job_id)
        if done_seq is not None and done_seq <= cursor:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TERMINAL_GRACE_S if status in TERMINAL else None
        while True:
            try:
                item = sub.queue.get_nowait()
            except asyncio.QueueEmpty:
                wait = ping_s if deadline is None else max(0.0, deadline - loop.time())
                if ping_s is not None and wait is not None:
                    wait = min(wait, ping_s)
                try:
                    async with asyncio.timeout(wait):
                        item = await sub.queue.get()
                except TimeoutError:
                    if ping_s is not None and (deadline is None or loop.time() < deadline):  # idle: keep-alive
                        yield None
                        continue
                    item = RESYNC  # finished without a job.done: deliver what is there and stop
                    deadline = loop.time()
            seq = item.get("seq")
            if item is RESYNC or not isinstance(seq, int) or seq > cursor + 1:
                async with contextlib.aclosing(reread()) as gap:
                    async for payload in gap:
                        yield payload
                        if payload["type"] == "job.done":
                            return
                if deadline is not None and loop.time() >= deadline:
                    return
            elif seq == cursor + 1:
                cursor = seq
                yield item
                if item.get("type") == "job.done":
                    return


# -- revocation -------------------------------------------------------------------------------------

REVOCATION_POLL_S = 2.0
"""Where no key cache listens for revocations (SQLite, a listener reconnecting): how often an open
stream re-reads its key."""
_WATCH_TICK_S = 0.25


def _key_revoked(key_id: str) -> bool:
    with session_factory()() as db:
        row = db.execute(select(ApiKey.revoked_at).where(ApiKey.id == key_id)).one_or_none()
        return row is None or row.revoked_at is not None


async def until_revoked(key_id: str) -> None:
    """Returns once the API key `key_id` is revoked, within the key cache's propagation time: the key is
    re-read when this process's key cache is emptied (a revocation's NOTIFY, `core.key_cache`) and at
    least every `key_cache.TTL_S`; without a listening cache, every `REVOCATION_POLL_S`."""
    loop = asyncio.get_running_loop()
    cache = key_cache.for_engine(get_engine())
    seen, checked = (cache.generation() if cache is not None else None), loop.time()
    while True:
        await asyncio.sleep(_WATCH_TICK_S)
        now = loop.time()
        if cache is not None and cache.listening:
            due = cache.generation() != seen or now - checked >= key_cache.TTL_S
        else:
            due = now - checked >= REVOCATION_POLL_S
        if not due:
            continue
        seen, checked = (cache.generation() if cache is not None else None), now
        try:
            if await to_thread.run_sync(_key_revoked, key_id):
                return
        except Exception as exc:  # noqa: BLE001 - the database away: the stream goes on, checked again later
            log.warning("stream key check: %s", exc.__class__.__name__)


def unix_seconds(created_at: Any) -> int:
    """A payload's `created_at` (ISO 8601 from core.events) as unix seconds."""
    if isinstance(created_at, int | float):
        return int(created_at)
    try:
        return int(datetime.fromisoformat(created_at).timestamp())
    except (TypeError, ValueError):
        return 0
