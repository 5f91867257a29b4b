"""What wakes a sweeper between its periodic passes: PostgreSQL's `NOTIFY keel_dispatch`.

The API does not publish the jobs it creates (`workers.dispatch`): a database trigger (migration
0007) notifies this channel whenever a committed change leaves a queued job with `dispatched_at`
null, and every worker's sweeper, woken by it, sends the job within milliseconds instead of at its
next pass. The listener runs on a connection of its own (autocommit), as `core.key_cache`'s does.
Without it (SQLite, the connection broken until it reconnects) a sweeper looks for jobs to send every
`WAKEUP_GAP_S` instead. (A pooler in transaction mode drops LISTEN silently: point the workers at
PostgreSQL itself, or jobs start on the periodic pass, `SWEEP_INTERVAL_S` later at most.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

CHANNEL = "keel_dispatch"
RETRY_S = 1.0
"""How often the listener looks at `stop()`, and waits before it reconnects."""
PING_S = 5.0


class Wakeup:
    """A daemon thread that calls `on_notify()` for every notification on `CHANNEL` (several that
    arrive together: once)."""

    def __init__(self, url: str, on_notify: Callable[[], None]) -> None:
        self.url = url
        self.on_notify = on_notify
        self.listening = threading.Event()
        """Set while subscribed (tests wait on it)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._listen, name="keel-dispatch-wakeup", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(RETRY_S + 1)

    def _listen(self) -> None:
        import psycopg
        from sqlalchemy.engine import make_url

        conninfo = make_url(self.url).set(drivername="postgresql").render_as_string(hide_password=False)
        warned = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    self.on_notify()  # anything committed while nobody listened
                    warned = False
                    pinged = time.monotonic()
                    while not self._stop.is_set():
                        if any(True for _ in conn.notifies(timeout=RETRY_S)):
                            self.on_notify()
                        if time.monotonic() - pinged >= PING_S:
                            conn.execute("SELECT 1")  # a broken connection raises here
                            pinged = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - any failure: periodic passes only, until it reconnects
                self.listening.clear()
                if not warned and not self._stop.is_set():
                    log.warning("dispatch wake-ups off until their listener reconnects (jobs are sent by the "
                                "periodic sweep meanwhile): %s", exc.__class__.__name__)
                    warned = True
                self._stop.wait(RETRY_S)
        self.listening.clear()


def for_database(on_notify: Callable[[], None]) -> Wakeup | None:
    """A listener on this process's database (not started); None on SQLite (no NOTIFY)."""
    from core.db import get_engine

    engine = get_engine()
    if engine.dialect.name != "postgresql":
        return None
    return Wakeup(engine.url.render_as_string(hide_password=False), on_notify)
