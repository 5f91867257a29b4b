"""The one module the API imports from workers: enqueue by task name (no task code imported)."""

from __future__ import annotations

from workers.celery_app import celery_app


def broker_reachable(timeout: float = 2.0) -> bool:
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
        return True
    except Exception:
        return False
