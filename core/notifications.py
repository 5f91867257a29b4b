"""One PostgreSQL `LISTEN`, held on a connection of its own until stopped: the API key cache's
revocations (`core.key_cache`) and the sweepers' dispatch wake-ups (`workers.wakeup`).

The connection is autocommit (notifications arrive between statements) and pinged every `PING_S`
(a broken connection raises only when used); any failure reconnects after `RETRY_S`, and the caller
is told both ways (`subscribed`, `lost`) so it can stop relying on notifications meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

PING_S = 5.0
"""How often the listener checks that its connection still works."""
RETRY_S = 1.0
"""How often the listener looks at its stop event, and how long it waits before reconnecting."""


def listen(url: str, channel: str, stop: threading.Event, *, subscribed: Callable[[], None],
           notified: Callable[[], None], lost: Callable[[], None], off: str) -> None:
    """Until `stop` is set: `LISTEN channel` on `url` (a SQLAlchemy URL), call `subscribed()` once
    subscribed, `notified()` for every notification, and `lost()` whenever the subscription ends (a
    failure, and the stop). `off` starts the warning logged once per outage."""
    import psycopg
    from sqlalchemy.engine import make_url

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    warned = False
    while not stop.is_set():
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f"LISTEN {channel}")
                subscribed()
                warned = False
                pinged = time.monotonic()
                while not stop.is_set():
                    for _ in conn.notifies(timeout=RETRY_S):  # wakes up to notice `stop`
                        notified()
                    if time.monotonic() - pinged >= PING_S:
                        conn.execute("SELECT 1")  # a broken connection raises here
                        pinged = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - any failure: the caller is told, then reconnect
            lost()
            if not warned and not stop.is_set():
                log.warning("%s: %s", off, exc.__class__.__name__)
                warned = True
            stop.wait(RETRY_S)
    lost()
