"""Authenticated API keys, remembered per process so that a request does not look its key up in the
database every time, without letting a revoked key through.

Entries are keyed by the key's HMAC (never the key itself), hold what the key resolves to
(`core.security.Caller`: its id, scope and project, detached from any session), and live at most
`TTL_S` seconds. Revoking a key (`core.security.revoke_api_key`) empties the revoking
process's cache and sends a PostgreSQL `NOTIFY` on `CHANNEL` in the revoking transaction; in every
process a listener thread, on a connection of its own, empties the cache when the notification
arrives (PostgreSQL delivers it at the commit, so within milliseconds). The cache answers only while
that listener is subscribed: before it has subscribed, while its connection is broken (until it has
subscribed again), and on SQLite, every lookup reads the database.

A lookup that missed and read the database stores its answer only if no invalidation happened while
it read (a generation count): an answer read just before a revocation committed is never kept.
A key revoked by writing `api_key.revoked_at` directly, without the NOTIFY, still works for up to
`TTL_S` in processes that had it cached.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import Session

from core.notifications import RETRY_S, listen

CHANNEL = "keel_api_keys"
TTL_S = 10.0
"""Longest an entry is used; bounds a revocation the listener cannot see (see the module doc)."""
MAX_ENTRIES = 10_000
"""More distinct live keys than this in one process: the cache starts over (it only ever holds valid keys)."""


class KeyCache:
    """One database's cache and its listener (see the module doc)."""

    def __init__(self, url: str, *, ttl_s: float = TTL_S) -> None:
        self.url = url
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[float, Any]] = {}
        self._generation = 0
        self._listening = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def listening(self) -> bool:
        return self._listening

    def get(self, digest: str) -> Any | None:
        if not self._listening:
            return None
        found = self._entries.get(digest)
        if found is None or found[0] < time.monotonic():
            return None
        return found[1]

    def generation(self) -> int:
        return self._generation

    def put(self, digest: str, entry: Any, generation: int) -> None:
        """Remember `entry` unless the cache was emptied since `generation` was read."""
        with self._lock:
            if not self._listening or generation != self._generation:
                return
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[digest] = (time.monotonic() + self.ttl_s, entry)

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def _set_listening(self, value: bool) -> None:
        with self._lock:
            self._listening = value
            self._generation += 1
            self._entries.clear()

    def start(self) -> None:
        """Start the listener thread (once; again after `stop`)."""
        old = self._thread
        if old is not None and old.is_alive():
            if not self._stop.is_set():
                return
            old.join(RETRY_S + 1)  # a stopped one finishes its last wait first
        with self._lock:
            if self._thread is not old:  # another thread started it meanwhile
                return
            # Not answering until the new listener has subscribed (a forked process may have copied
            # a cache that was answering, without the thread that kept it honest).
            self._listening = False
            self._generation += 1
            self._entries.clear()
            self._stop.clear()
            self._thread = threading.Thread(target=self._listen, name="keel-key-cache", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop listening (the cache stops answering at once; the thread ends within `RETRY_S`)."""
        self._stop.set()
        self._set_listening(False)

    def _listen(self) -> None:
        listen(self.url, CHANNEL, self._stop, subscribed=lambda: self._set_listening(True), notified=self.clear,
               lost=lambda: self._set_listening(False), off="API key cache off until its listener reconnects")


_caches: dict[str, KeyCache] = {}
"""By database URL: every engine of one database shares its cache (and its listener)."""
_caches_lock = threading.Lock()
_urls: WeakKeyDictionary[Engine, str] = WeakKeyDictionary()


def _url(engine: Engine) -> str:
    url = _urls.get(engine)
    if url is None:
        url = _urls[engine] = engine.url.render_as_string(hide_password=False)
    return url


def for_engine(engine: Engine) -> KeyCache | None:
    """The cache of `engine`'s database, its listener started; None on SQLite (no NOTIFY: no cache)."""
    if engine.dialect.name != "postgresql":
        return None
    url = _url(engine)
    cache = _caches.get(url)
    if cache is None:
        with _caches_lock:
            cache = _caches.get(url)
            if cache is None:
                cache = _caches[url] = KeyCache(url)
    if cache._thread is None or not cache._thread.is_alive():
        cache.start()
    return cache


def revoked(db: Session) -> None:
    """A key is being revoked in `db`'s transaction: empty this process's cache now, and every
    process's when the transaction commits (the NOTIFY)."""
    bind = db.get_bind()
    cache = _caches.get(_url(bind.engine))
    if cache is not None:
        cache.clear()
        # Again at the commit: a lookup in this process may have read the key before it committed.
        event.listen(db, "after_commit", lambda _session: cache.clear(), once=True)
    if bind.dialect.name == "postgresql":
        db.execute(select(func.pg_notify(CHANNEL, "")))


def lookup(cache: KeyCache | None, digest: str, load: Callable[[], Any | None]) -> Any | None:
    """The entry of `digest` from `cache`, else `load()` (remembered when it finds a valid key)."""
    if cache is None:
        return load()
    hit = cache.get(digest)
    if hit is not None:
        return hit
    generation = cache.generation()
    entry = load()
    if entry is not None:
        cache.put(digest, entry, generation)
    return entry
