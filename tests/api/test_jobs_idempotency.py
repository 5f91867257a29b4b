"""Job creates with an Idempotency-Key: the first response replayed, race-safe, a twin that commits
first wins."""

from __future__ import annotations

import json
import secrets
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select, update

from core.models import IdempotencyKey, Job
from tests.api.job_requests import create, make_file, project_of, rm_body

# --- idempotency ----------------------------------------------------------------------------------

def _jobs_in(db, project_id: str) -> int:
    db.expire_all()
    return db.scalar(select(func.count()).select_from(Job).where(Job.project_id == project_id))


def test_idempotent_create_returns_the_first_response(client, auth, other_auth, db, project_key, files, dispatched):
    key = {"Idempotency-Key": f"k-{secrets.token_hex(4)}"}
    first = create(client, auth, rm_body(files), **key)
    assert first.status_code == 201
    # Same body, keys in another order and other spacing: the same request.
    raw = json.dumps(dict(reversed(list(rm_body(files).items()))), indent=2)
    again = client.post("/v1/jobs", content=raw, headers={**auth, **key, "Content-Type": "application/json"})
    assert (again.status_code, again.json()) == (201, first.json())
    assert again.headers["Idempotent-Replayed"] == "true"
    assert _jobs_in(db, project_key[0]) == 1
    changed = create(client, auth, {**rm_body(files), "seed": 1}, **key)
    assert (changed.status_code, changed.json()["code"]) == (422, "idempotency_mismatch")
    assert changed.json()["param"] == "Idempotency-Key"
    # Keys are per project.
    other_files = {"preference": make_file(db, project_of(db, other_auth), "preference")}
    assert create(client, other_auth, rm_body(other_files), **key).status_code == 201
    # Past the TTL a key is free again.
    db.execute(update(IdempotencyKey).where(IdempotencyKey.key == key["Idempotency-Key"])
               .values(created_at=datetime.now(UTC) - timedelta(days=2)))
    db.commit()
    late = create(client, auth, rm_body(files), **key)
    assert late.status_code == 201 and late.json()["id"] != first.json()["id"]
    # Without a key nothing is remembered.
    assert create(client, auth, rm_body(files)).json()["id"] != create(client, auth, rm_body(files)).json()["id"]


def test_idempotency_is_race_safe(client, auth, db, project_key, files, dispatched):
    key = {"Idempotency-Key": f"race-{secrets.token_hex(4)}"}
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: create(client, auth, rm_body(files), **key), range(8)))
    assert {r.status_code for r in responses} == {201}
    assert len({r.json()["id"] for r in responses}) == 1
    assert _jobs_in(db, project_key[0]) == 1


def test_a_twin_that_commits_first_wins(client, auth, db, project_key, files, dispatched, monkeypatch):
    """The twin commits between our replay check and our commit: ours rolls back and answers with the twin's."""
    from api.routes.jobs import creation

    key = f"twin-{secrets.token_hex(4)}"
    resolve = creation._resolve

    def resolve_then_twin(db_, project_id, body, **options):
        spec, nodes = resolve(db_, project_id, body, **options)
        with TestSession() as other:
            twin = Job(project_id=project_id, method="reward_model", spec=spec, model="org/name",
                       training_file_id=files["preference"])
            other.add(twin)
            other.flush()
            from api.idempotency import _fingerprint
            fp = _fingerprint("POST", "/v1/jobs", json.dumps(rm_body(files)).encode())
            other.add(IdempotencyKey(project_id=project_id, key=key, request_hash=fp, response_status=201,
                                     response_body={"id": twin.id, "twin": True}))
            other.commit()
        return spec, nodes

    from core.db import session_factory
    TestSession = session_factory()
    monkeypatch.setattr(creation, "_resolve", resolve_then_twin)
    r = create(client, auth, rm_body(files), **{"Idempotency-Key": key})
    assert r.status_code == 201 and r.json()["twin"] is True
    assert _jobs_in(db, project_key[0]) == 1 and dispatched == []
