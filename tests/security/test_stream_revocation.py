"""Issue 27, item 10: revoking an API key closes its open event streams (74 events had still arrived
in the 23 s after a revocation), on a real server: within the key cache's propagation time."""

from __future__ import annotations

import secrets
import threading

import httpx

from core.db import session_scope
from core.key_cache import TTL_S
from core.security import get_or_create_project, issue_api_key
from tests.workers.factories import add_file, add_running_job


def test_revoking_a_key_closes_its_streams(live_server):
    with session_scope() as db:
        project, _ = get_or_create_project(db, f"revoke-{secrets.token_hex(4)}")
        _, admin = issue_api_key(db, project, admin=True)
        row, key = issue_api_key(db, project)
        project_id, key_id = project.id, row.id
    job_id = add_running_job(project_id, add_file(project_id))  # streams until it finishes: never, here
    ended = threading.Event()
    opened = threading.Event()
    status: list[int] = []

    def read() -> None:
        with httpx.stream("GET", f"{live_server}/v1/jobs/{job_id}/events/stream",
                          headers={"Authorization": f"Bearer {key}"}, timeout=60) as r:
            status.append(r.status_code)
            opened.set()
            for _ in r.iter_bytes():
                pass
        ended.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert opened.wait(30) and status == [200]
    assert not ended.wait(1.0)  # a live stream of a running job stays open
    r = httpx.delete(f"{live_server}/v1/keys/{key_id}", headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code == 200, r.text
    assert ended.wait(TTL_S + 10), "the revoked key's stream is still open"
    assert httpx.get(f"{live_server}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}).status_code == 401
