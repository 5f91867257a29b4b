"""Per-key limits: requests per minute, and concurrent event streams.

Both are shared by every API process through Redis (`KEEL_REDIS_URL`), so N processes behind a load
balancer still give a key one budget; without Redis (embedded mode) each process counts on its own.
When Redis stops answering, the process falls back to its own counts for `FALLBACK_S` and says so in
the log, instead of refusing or stalling every request.

Requests: the `limits` library's sliding-window counter over one minute (two counters per key in
Redis, taken and read by one atomic script: one round trip, from the event loop for API requests).
Streams: a Redis sorted set per key of stream leases that expire unless renewed, so a stream whose
process died stops counting within `LEASE_S`.
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
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import metrics
from core.config import settings

log = logging.getLogger(__name__)

FALLBACK_S = 5.0
"""After a Redis error, count in this process for this long before trying Redis again."""
REDIS_TIMEOUT_S = 0.5
"""A Redis round trip slower than this counts as Redis being down (requests never wait longer)."""
LEASE_S = 60.0
"""A stream's slot expires this long after its last renewal (a process that died frees its slots)."""
RENEW_S = 15.0


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
# shift an expired window, take one request if the weighted count allows it, and return the counts.
_SLIDING_WINDOW = """
local limit = tonumber(ARGV[1])
local expiry = tonumber(ARGV[2]) * 1000
local current_ttl = tonumber(redis.call('pttl', KEYS[2]))
if current_ttl > 0 and current_ttl < expiry then
    redis.call('rename', KEYS[2], KEYS[1])
    redis.call('set', KEYS[2], 0, 'PX', current_ttl + expiry)
end
local previous_count = tonumber(redis.call('get', KEYS[1])) or 0
local previous_ttl = math.max(0, tonumber(redis.call('pttl', KEYS[1])) or 0)
local current_count = tonumber(redis.call('get', KEYS[2])) or 0
current_ttl = math.max(0, tonumber(redis.call('pttl', KEYS[2])) or 0)
local allowed = 0
if math.floor(previous_count * previous_ttl / expiry) + current_count + 1 <= limit then
    allowed = 1
    if redis.call('exists', KEYS[2]) == 1 then
        current_count = redis.call('incrby', KEYS[2], 1)
    else
        redis.call('set', KEYS[2], 1, 'PX', expiry * 2)
        current_count, current_ttl = 1, expiry * 2
    end
end
return {allowed, previous_count, previous_ttl, current_count, current_ttl}
"""


class RateLimiter:
    """Requests per minute per API key (see the module doc)."""

    def __init__(self, redis_url: str | None = None, *, prefix: str = "keel:ratelimit", window_s: int = 60) -> None:
        self.window_s = window_s
        self.prefix = prefix
        self.redis_url = redis_url
        self._local = SlidingWindowCounterRateLimiter(MemoryStorage())
        self._script = (redis.Redis.from_url(redis_url, **_redis_options()).register_script(_SLIDING_WINDOW)
                        if redis_url else None)
        self._async_scripts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self._fallback = _Fallback("rate limiter")

    def check(self, key_id: str, per_window: int) -> Budget | None:
        """Count one request of `key_id` against `per_window` requests per window (a minute); None when
        rate limiting is off (`per_window` <= 0)."""
        if per_window <= 0:
            return None
        item = RateLimitItemPerSecond(per_window, self.window_s)
        if self._script is not None and self._fallback.redis_ok():
            try:
                return self._budget(item, self._script(keys=self._keys(item, key_id), args=[per_window, self.window_s]))
            except (redis.RedisError, OSError) as exc:
                self._fallback.failed(exc)
        return self._hit(self._local, item, key_id)

    async def acheck(self, key_id: str, per_window: int) -> Budget | None:
        """`check` on the event loop (an asyncio Redis client of this loop): no thread for it."""
        if per_window <= 0:
            return None
        item = RateLimitItemPerSecond(per_window, self.window_s)
        if self.redis_url and self._fallback.redis_ok():
            try:
                async with asyncio.timeout(REDIS_TIMEOUT_S):  # one timer for the round trip (see _async_script)
                    counts = await self._async_script()(keys=self._keys(item, key_id),
                                                        args=[per_window, self.window_s])
                return self._budget(item, counts)
            except (redis.RedisError, OSError, TimeoutError) as exc:
                self._fallback.failed(exc)
        return self._hit(self._local, item, key_id)

    def _async_script(self) -> Any:
        loop = asyncio.get_running_loop()
        script = self._async_scripts.get(loop)
        if script is None:
            # No socket timeout on the client: with one, redis-py wraps every write in `wait_for` (a
            # task per command) and every read in a timer; `acheck` bounds the whole call instead.
            client = aioredis.Redis.from_url(self.redis_url, socket_timeout=None,  # (redis-py's default: 5 s)
                                             socket_connect_timeout=REDIS_TIMEOUT_S)
            script = self._async_scripts[loop] = client.register_script(_SLIDING_WINDOW)
        return script

    def _keys(self, item: RateLimitItemPerSecond, key_id: str) -> list[str]:
        current = f"{self.prefix}:{{{item.key_for(key_id)}}}"  # `limits`' RedisStorage key layout
        return [f"{current}/-1", current]

    def _budget(self, item: RateLimitItemPerSecond, counts: list[Any]) -> Budget:
        """The `X-RateLimit-*` figures from the script's counts, as `limits` computes its window stats."""
        allowed, previous, previous_ttl_ms, current, current_ttl_ms = (int(c) for c in counts)
        expiry = item.get_expiry()
        previous_expires_in, current_expires_in = previous_ttl_ms / 1000, current_ttl_ms / 1000
        remaining = max(0, item.amount - math.floor(previous * previous_expires_in / expiry + current))
        reset_in = math.inf
        if previous:
            reset_in = previous_expires_in % (expiry / previous)
        if current:
            reset_in = min(reset_in, current_expires_in % expiry)
        reset = 0 if reset_in == math.inf else max(0, math.ceil(reset_in))
        return Budget(bool(allowed), item.amount, remaining, reset)

    @staticmethod
    def _hit(limiter: SlidingWindowCounterRateLimiter, item: RateLimitItemPerSecond, key_id: str) -> Budget:
        allowed = limiter.hit(item, key_id)
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
    client gone, or the server shutting down."""

    def __init__(self, content: AsyncIterator[bytes], *args: Any, slots: StreamSlots, lease: Lease | None,
                 **kwargs: Any) -> None:
        super().__init__(self._renewing(content), *args, **kwargs)
        self.slots, self.lease = slots, lease

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        metrics.SSE_CONNECTIONS.inc()
        try:
            await super().__call__(scope, receive, send)
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


class RateLimitHeaders:
    """Puts the `X-RateLimit-*` headers that authentication left in `request.state.rate_limit` on
    the response. Plain ASGI, like the request-id middleware."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                budget = scope.get("state", {}).get("rate_limit")
                if budget is not None:
                    headers = MutableHeaders(scope=message)
                    for name, value in budget.headers().items():
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


rate_limiter = RateLimiter(settings.REDIS_URL or None)
stream_slots = StreamSlots(settings.REDIS_URL or None)
