"""What wakes a sweeper between its periodic passes: PostgreSQL's `NOTIFY keel_dispatch`.

The API does not publish the jobs it creates (`workers.dispatch`): a database trigger (migration
0007) notifies this channel whenever a committed change leaves a queued job with `dispatched_at`
null, and every worker's sweeper, woken by it, sends the job within milliseconds instead of at its
next pass. The listener runs on a connection of its own (`core.notifications`, as the API key
cache's does). Without it (SQLite, the connection broken until it reconnects) a sweeper looks for
jobs to send every `WAKEUP_GAP_S` instead. (A pooler in transaction mode drops LISTEN silently: point the workers at
PostgreSQL itself, or jobs start on the periodic pass, `SWEEP_INTERVAL_S` later at most.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from core.notifications import RETRY_S, listen

CHANNEL = "keel_dispatch"


class Wakeup:
    """A daemon thread that calls `on_notify()` for every notification on `CHANNEL`, and once each time
    it subscribes (what was committed while nobody listened)."""

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
        listen(self.url, CHANNEL, self._stop, subscribed=self._subscribed, notified=self.on_notify,
               lost=self.listening.clear, off="dispatch wake-ups off until their listener reconnects (each "
               "sweeper polls for jobs to send meanwhile)")

    def _subscribed(self) -> None:
        self.listening.set()
        self.on_notify()  # anything committed while nobody listened


def for_database(on_notify: Callable[[], None]) -> Wakeup | None:
    """A listener on this process's database (not started); None on SQLite (no NOTIFY)."""
    from core.db import get_engine

    engine = get_engine()
    if engine.dialect.name != "postgresql":
        return None
    return Wakeup(engine.url.render_as_string(hide_password=False), on_notify)
