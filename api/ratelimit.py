"""Per-key limits: requests per minute, and concurrent event streams; and failed authentications per
client address (`auth_failures`, the same sliding window under its own prefix).

Both are shared by every API process through Redis (`KEEL_REDIS_URL`), so N processes behind a load
balancer still give a key one budget; without Redis (embedded mode) each process counts on its own.
When Redis stops answering, the process falls back to its own counts for `FALLBACK_S` and says so in
the log, instead of refusing or stalling every request.

Requests: the `limits` library's sliding-window counter over one minute (two counters per key in
Redis, taken and read by one atomic script: one round trip, from the event loop for API requests).
Streams: a Redis sorted set per key of stream leases that expire unless renewed, so a stream whose
process died stops counting within `LEASE_S`.

Token leases (`acheck`, the event-loop path every API request takes). A key busy in this process
takes up to n requests' worth of its budget per round trip: the script grants g = min(n, what the
weighted count allows) tokens (0 = refused), counts all g in Redis at once, and the process spends
the other g - 1 on the key's next requests without a round trip, for at most `TOKEN_LEASE_S` after
the grant; tokens left then are dropped. n is half the key's requests in this process over the last
`TOKEN_LEASE_S`, between 1 and min(`MAX_LEASE`, limit // 100): a key with a limit under 200 per
window, or fewer than 4 requests per lease period here, gets n = 1, one round trip per request,
exactly as without leases. One lease per key and event loop is taken at a time (requests that find
none left wait for it), so:

- the budget stays shared and is never exceeded: every request is counted in Redis before it is
  admitted, by at most `TOKEN_LEASE_S` (Redis runs ahead of the spending, never behind it);
- over-counting is bounded: tokens that expire unspent were counted but admitted nobody. At most
  n - 1 <= 1% of the limit per process and key per `TOKEN_LEASE_S`, and only when the key's traffic
  slows down (at a steady rate a lease lasts about half of it), or n when a lease's answer never
  arrives (a timeout, a cancelled request); the key is refused that much early;
- refusals come from Redis's count: a process with no tokens left asks Redis, and a refused lease
  leaves it none;
- headers stay truthful: a request served from a lease shows the remaining budget Redis reported
  with it plus the tokens still unspent here (Redis already counted them): one process alone shows
  the count-down one round trip per request gives, and spending its tokens never raises the figure
  (only the sliding window's decay does, as before); Reset counts down from the lease's figure.

The sync `check` (routes that authenticate in a worker thread) keeps one round trip per request and
no tokens; the fallback without Redis counts each request in the process, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import redis
import redis.asyncio as aioredis
from fastapi.responses import StreamingResponse
from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import SlidingWindowCounterRateLimiter
from starlette.types import Message, Receive, Scope, Send

from api import metrics
from api.errors import ApiError
from core.config import settings

log = logging.getLogger(__name__)

FALLBACK_S = 5.0
"""After a Redis error, count in this process for this long before trying Redis again."""
REDIS_TIMEOUT_S = 0.5
"""A Redis round trip slower than this counts as Redis being down (requests never wait longer)."""
LEASE_S = 60.0
"""A stream's slot expires this long after its last renewal (a process that died frees its slots)."""
RENEW_S = 15.0
TOKEN_LEASE_S = 1.0
"""Tokens a process took from Redis ahead of its requests are spent within this long, or dropped."""
MAX_LEASE = 32
"""At most this many tokens per round trip (and never over 1% of the key's limit)."""
_PRUNE_AT = 1024


@dataclass(frozen=True)
class Budget:
    """One request's standing against its key's budget (the `X-RateLimit-*` headers)."""

    allowed: bool
    limit: int
    remaining: int
    reset_s: int
    """Seconds until the next request would be allowed (when refused) or the window resets."""

    def headers(self) -> dict[str, str]:
        out = {"X-RateLimit-Limit": str(self.limit), "X-RateLimit-Remaining": str(self.remaining),
               "X-RateLimit-Reset": str(self.reset_s)}
        if not self.allowed:
            out["Retry-After"] = str(max(1, self.reset_s))
        return out


class _Fallback:
    """Remembers when Redis last failed, and logs the switch once per outage."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.down_until = 0.0

    def redis_ok(self) -> bool:
        return time.monotonic() >= self.down_until

    def failed(self, exc: Exception) -> None:
        if self.redis_ok():
            log.warning("%s: Redis unavailable (%s); counting in this process for %.0f s",
                        self.what, exc.__class__.__name__, FALLBACK_S)
        self.down_until = time.monotonic() + FALLBACK_S


def _redis_options() -> dict[str, Any]:
    return {"socket_timeout": REDIS_TIMEOUT_S, "socket_connect_timeout": REDIS_TIMEOUT_S}


# The sliding-window counter of the `limits` library (same keys, same arithmetic), in one round trip:
# shift an expired window, take as many of ARGV[3] requests (1 if absent) as the weighted count
# allows, and return how many with the counts.
_SLIDING_WINDOW = """
local limit = tonumber(ARGV[1])
local expiry = tonumber(ARGV[2]) * 1000
local wanted = tonumber(ARGV[3]) or 1
local current_ttl = tonumber(redis.call('pttl', KEYS[2]))
if current_ttl > 0 and current_ttl < expiry then
    redis.call('rename', KEYS[2], KEYS[1])
    redis.call('set', KEYS[2], 0, 'PX', current_ttl + expiry)
end
local previous_count = tonumber(redis.call('get', KEYS[1])) or 0
local previous_ttl = math.max(0, tonumber(redis.call('pttl', KEYS[1])) or 0)
local current_count = tonumber(redis.call('get', KEYS[2])) or 0
current_ttl = math.max(0, tonumber(redis.call('pttl', KEYS[2])) or 0)
local granted = math.max(0, math.min(wanted, limit - math.floor(previous_count * previous_ttl / expiry) - current_count))
if granted > 0 then
    if redis.call('exists', KEYS[2]) == 1 then
        current_count = redis.call('incrby', KEYS[2], granted)
    else
        redis.call('set', KEYS[2], granted, 'PX', expiry * 2)
        current_count, current_ttl = granted, expiry * 2
    end
end
return {granted, previous_count, previous_ttl, current_count, current_ttl}
"""


class _Tokens:
    """One key's leased tokens in one event loop (see the module doc), the figures Redis gave with
    them, and the key's recent request count here, which sizes the next lease."""

    __slots__ = ("bucket", "count", "expires", "left", "limit", "previous", "refilling", "remaining", "reset_at")

    def __init__(self, limit: int, now: float) -> None:
        self.limit = limit
        self.left, self.expires, self.remaining, self.reset_at = 0, 0.0, 0, 0.0
        self.refilling: asyncio.Event | None = None
        """Set while one request of the key takes a lease; the others wait for it."""
        self.bucket, self.count, self.previous = now, 0, 0

    def arrive(self, now: float, ttl: float) -> float:
        """Counts a request; returns the requests over the last `ttl` (two buckets of `ttl`, the older
        one weighted by how much of it is still inside)."""
        elapsed = now - self.bucket
        if elapsed >= ttl:
            self.previous = self.count if elapsed < 2 * ttl else 0
            self.count = 0
            self.bucket = self.bucket + ttl if elapsed < 2 * ttl else now
            elapsed = now - self.bucket
        self.count += 1
        return self.previous * (1 - elapsed / ttl) + self.count

    def spend(self, now: float) -> Budget | None:
        if self.left > 0 and now < self.expires:
            self.left -= 1
            return Budget(True, self.limit, self.remaining + self.left, max(0, math.ceil(self.reset_at - now)))
        return None

    def fill(self, granted: int, remaining: int, reset_in: float, now: float, ttl: float) -> None:
        """Keeps a lease's tokens but the one its own request spends (none when refused)."""
        self.left = max(0, granted - 1)
        self.expires, self.remaining, self.reset_at = now + ttl, remaining, now + reset_in


class _LoopState:
    """What `acheck` keeps per event loop: the asyncio script client and the keys' tokens. One loop
    runs one coroutine at a time, so none of it needs a lock."""

    __slots__ = ("prune_at", "script", "tokens")

    def __init__(self, script: Any) -> None:
        self.script = script
        self.tokens: dict[tuple[str, int], _Tokens] = {}
        self.prune_at = _PRUNE_AT

    def tokens_of(self, key_id: str, limit: int, now: float, ttl: float) -> _Tokens:
        tokens = self.tokens.get((key_id, limit))
        if tokens is None:
            if len(self.tokens) >= self.prune_at:  # forget keys quiet for two lease periods
                self.tokens = {k: t for k, t in self.tokens.items() if t.bucket > now - 2 * ttl or t.refilling}
                self.prune_at = max(_PRUNE_AT, 2 * len(self.tokens))
            tokens = self.tokens[(key_id, limit)] = _Tokens(limit, now)
        return tokens


class RateLimiter:
    """Requests per minute per API key (see the module doc)."""

    def __init__(self, redis_url: str | None = None, *, prefix: str = "keel:ratelimit", window_s: int = 60,
                 lease_s: float = TOKEN_LEASE_S) -> None:
        self.window_s = window_s
        self.prefix = prefix
        self.redis_url = redis_url
        # A lease never outlives 1/60 of the window, whatever the window (tests use 2 s windows).
        self.lease_s = min(lease_s, window_s / 60)
        self.redis_calls = 0
        """Script round trips made (both paths; tests read it)."""
        self._local = SlidingWindowCounterRateLimiter(MemoryStorage())
        self._script = (redis.Redis.from_url(redis_url, **_redis_options()).register_script(_SLIDING_WINDOW)
                        if redis_url else None)
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = weakref.WeakKeyDictionary()
        self._fallback = _Fallback("rate limiter")

    def check(self, key_id: str, per_window: int, *, count: bool = True) -> Budget | None:
        """Count one request of `key_id` against `per_window` requests per window (a minute); None when
        rate limiting is off (`per_window` <= 0). One round trip per request: no leased tokens.
        `count=False` only reads the standing (`allowed`: the next request would be)."""
        if per_window <= 0:
            return None
        item = RateLimitItemPerSecond(per_window, self.window_s)
        if self._script is not None and self._fallback.redis_ok():
            try:
                self.redis_calls += 1
                counts = self._script(keys=self._keys(item, key_id), args=[per_window, self.window_s, int(count)])
                return self._budget(item, counts, count=count)
            except (redis.RedisError, OSError) as exc:
                self._fallback.failed(exc)
        return self._hit(self._local, item, key_id, count=count)

    def spend(self, key_id: str, per_window: int, amount: int) -> None:
        """Count `amount` units at once (the tokens a completion used, known only once it ended), as far
        as the budget goes: usage can exhaust the budget, so the key's next request is refused."""
        if per_window <= 0 or amount <= 0:
            return
        item = RateLimitItemPerSecond(per_window, self.window_s)
        if self._script is not None and self._fallback.redis_ok():
            try:
                self.redis_calls += 1
                self._script(keys=self._keys(item, key_id), args=[per_window, self.window_s, amount])
                return
            except (redis.RedisError, OSError) as exc:
                self._fallback.failed(exc)
        remaining = self._local.get_window_stats(item, key_id).remaining
        if remaining > 0:
            self._local.hit(item, key_id, cost=min(amount, remaining))

    async def acheck(self, key_id: str, per_window: int) -> Budget | None:
        """`check` on the event loop (an asyncio Redis client of this loop, no thread), served from
        the key's leased tokens while it has some (see the module doc)."""
        if per_window <= 0:
            return None
        if not self.redis_url:
            return self._hit(self._local, RateLimitItemPerSecond(per_window, self.window_s), key_id)
        state, now = self._loop_state(), time.monotonic()
        tokens = state.tokens_of(key_id, per_window, now, self.lease_s)
        recent = tokens.arrive(now, self.lease_s)
        budget = tokens.spend(now)
        if budget is None and tokens.refilling is not None:
            await tokens.refilling.wait()  # bounded: the lease's round trip has a timeout
            budget = tokens.spend(time.monotonic())
        if budget is not None:
            return budget
        item = RateLimitItemPerSecond(per_window, self.window_s)
        if self._fallback.redis_ok():
            # Another lease under way (it did not cover this request): ask for this request alone.
            wanted = 1 if tokens.refilling else max(1, min(int(recent) // 2, MAX_LEASE, per_window // 100))
            refilling = None
            if wanted > 1:
                refilling = tokens.refilling = asyncio.Event()
            try:
                async with asyncio.timeout(REDIS_TIMEOUT_S):  # one timer for the round trip (see _loop_state)
                    self.redis_calls += 1
                    counts = await state.script(keys=self._keys(item, key_id),
                                                args=[per_window, self.window_s, wanted])
                granted, remaining, reset_in = self._figures(item, counts)
                if wanted > 1:
                    tokens.fill(granted, remaining, reset_in, time.monotonic(), self.lease_s)
                return Budget(granted > 0, per_window, remaining + tokens.left if wanted > 1 else remaining,
                              max(0, math.ceil(reset_in)))
            except (redis.RedisError, OSError, TimeoutError) as exc:
                self._fallback.failed(exc)
            finally:
                if refilling is not None:
                    tokens.refilling = None
                    refilling.set()
        return self._hit(self._local, item, key_id)

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            # No socket timeout on the client: with one, redis-py wraps every write in `wait_for` (a
            # task per command) and every read in a timer; `acheck` bounds the whole call instead.
            client = aioredis.Redis.from_url(self.redis_url, socket_timeout=None,  # (redis-py's default: 5 s)
                                             socket_connect_timeout=REDIS_TIMEOUT_S)
            state = self._loops[loop] = _LoopState(client.register_script(_SLIDING_WINDOW))
        return state

    def _keys(self, item: RateLimitItemPerSecond, key_id: str) -> list[str]:
        current = f"{self.prefix}:{{{item.key_for(key_id)}}}"  # `limits`' RedisStorage key layout
        return [f"{current}/-1", current]

    def _budget(self, item: RateLimitItemPerSecond, counts: list[Any], *, count: bool = True) -> Budget:
        granted, remaining, reset_in = self._figures(item, counts)
        return Budget((granted if count else remaining) > 0, item.amount, remaining, max(0, math.ceil(reset_in)))

    @staticmethod
    def _figures(item: RateLimitItemPerSecond, counts: list[Any]) -> tuple[int, int, float]:
        """Tokens granted, remaining budget and seconds to the reset, from the script's counts, as
        `limits` computes its window stats."""
        granted, previous, previous_ttl_ms, current, current_ttl_ms = (int(c) for c in counts)
        expiry = item.get_expiry()
        previous_expires_in, current_expires_in = previous_ttl_ms / 1000, current_ttl_ms / 1000
        remaining = max(0, item.amount - math.floor(previous * previous_expires_in / expiry + current))
        reset_in = math.inf
        if previous:
            reset_in = previous_expires_in % (expiry / previous)
        if current:
            reset_in = min(reset_in, current_expires_in % expiry)
        return granted, remaining, 0.0 if reset_in == math.inf else reset_in

    @staticmethod
    def _hit(limiter: SlidingWindowCounterRateLimiter, item: RateLimitItemPerSecond, key_id: str, *,
             count: bool = True) -> Budget:
        allowed = (limiter.hit if count else limiter.test)(item, key_id)
        stats = limiter.get_window_stats(item, key_id)
        reset = max(0, math.ceil(stats.reset_time - time.time()))
        return Budget(allowed, item.amount, stats.remaining, reset)


# One atomic step: drop expired leases, then take a slot if one is free.
_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


@dataclass(frozen=True)
class Lease:
    key_id: str
    token: str
    shared: bool


class StreamSlots:
    """At most N concurrent event streams per API key (see the module doc)."""

    def __init__(self, redis_url: str | None = None, *, prefix: str = "keel:streams") -> None:
        self.prefix = prefix
        self._redis = redis.Redis.from_url(redis_url, **_redis_options()) if redis_url else None
        self._acquire = self._redis.register_script(_ACQUIRE) if self._redis is not None else None
        self._local: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._fallback = _Fallback("stream cap")

    def acquire(self, key_id: str, cap: int) -> Lease | None:
        """A slot for one more stream of `key_id`, or None when it holds `cap` already (0 = no cap)."""
        token = uuid.uuid4().hex
        if self._redis is not None and self._fallback.redis_ok():
            now = time.time()
            try:
                ok = self._acquire(keys=[self._key(key_id)],
                                   args=[now, now + LEASE_S, cap if cap > 0 else 2**31, token, int(LEASE_S * 1000)])
                return Lease(key_id, token, shared=True) if ok else None
            except (redis.RedisError, OSError) as exc:
                self._fallback.failed(exc)
        with self._lock:
            held = self._local.setdefault(key_id, set())
            if 0 < cap <= len(held):
                return None
            held.add(token)
        return Lease(key_id, token, shared=False)

    def renew(self, lease: Lease) -> None:
        if lease.shared and self._redis is not None:
            try:
                key = self._key(lease.key_id)
                self._redis.zadd(key, {lease.token: time.time() + LEASE_S}, xx=True)
                self._redis.pexpire(key, int(LEASE_S * 1000))
            except (redis.RedisError, OSError) as exc:
                log.warning("stream cap: renewing a lease failed (%s)", exc.__class__.__name__)

    def release(self, lease: Lease) -> None:
        if lease.shared:
            if self._redis is not None:
                try:
                    self._redis.zrem(self._key(lease.key_id), lease.token)
                except (redis.RedisError, OSError) as exc:  # the lease expires by itself
                    log.warning("stream cap: releasing a lease failed (%s)", exc.__class__.__name__)
            return
        with self._lock:
            held = self._local.get(lease.key_id)
            if held is not None:
                held.discard(lease.token)
                if not held:
                    del self._local[lease.key_id]

    def _key(self, key_id: str) -> str:
        return f"{self.prefix}:{key_id}"


class LeasedStream(StreamingResponse):
    """A streaming response that holds a stream slot while it runs (renewed as it streams: the
    keep-alive pings come more often than `RENEW_S`) and gives it back however it ends: finished,
    client gone, the server shutting down, or its key revoked (`api.streams.until_revoked`)."""

    def __init__(self, content: AsyncIterator[bytes], *args: Any, slots: StreamSlots, lease: Lease | None,
                 **kwargs: Any) -> None:
        super().__init__(self._renewing(content), *args, **kwargs)
        self.slots, self.lease = slots, lease

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from api import streams  # (it reads the database: imported where a stream runs)

        metrics.SSE_CONNECTIONS.inc()
        started = revoked = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            async with anyio.create_task_group() as group:
                async def watch(key_id: str) -> None:
                    nonlocal revoked
                    await streams.until_revoked(key_id)
                    revoked = True
                    group.cancel_scope.cancel()

                if self.lease is not None:
                    group.start_soon(watch, self.lease.key_id)
                await super().__call__(scope, receive, sending)
                group.cancel_scope.cancel()
            if revoked:  # the key was revoked: the stream ends as if the job had
                if not started:
                    await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            metrics.SSE_CONNECTIONS.dec()
            if self.lease is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self.slots.release, self.lease)

    async def _renewing(self, content: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        renewed = time.monotonic()
        async with contextlib.aclosing(content) as chunks:
            async for chunk in chunks:
                if self.lease is not None and self.lease.shared and time.monotonic() - renewed >= RENEW_S:
                    renewed = time.monotonic()
                    await anyio.to_thread.run_sync(self.slots.renew, self.lease)
                yield chunk


rate_limiter = RateLimiter(settings.REDIS_URL or None)
auth_failures = RateLimiter(settings.REDIS_URL or None, prefix="keel:authfail")
"""Failed authentications per client address (`KEEL_AUTH_FAILURES_PER_MINUTE`): a budget of its own."""
stream_slots = StreamSlots(settings.REDIS_URL or None)


async def event_stream(key_id: str, content: AsyncIterator[bytes]) -> LeasedStream:
    """`content` as a server-sent-events response holding one of the key's stream slots; a 429
    `too_many_streams` when it holds the deployment's `KEEL_MAX_STREAMS_PER_KEY` already. Call it after
    every check that could still refuse the request (a slot taken here is given back by the response)."""
    cap = settings.MAX_STREAMS_PER_KEY
    lease = await anyio.to_thread.run_sync(stream_slots.acquire, key_id, cap)
    if lease is None:
        raise ApiError(429, "too_many_streams", f"This API key already has {cap} event streams open "
                       "(the deployment's KEEL_MAX_STREAMS_PER_KEY); close one first.", headers={"Retry-After": "5"})
    return LeasedStream(content, media_type="text/event-stream",
                        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                        slots=stream_slots, lease=lease)
