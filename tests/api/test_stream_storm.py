"""A connection storm on one job's SSE stream: many subscribers connecting at once must all be served.

Regression: each stream used to hold a pooled DB connection between thread hops (authenticate, then the
ownership check, then closing the session); with more concurrent connects than the pool's connections,
every worker thread waited on the pool and the requests failed with HTTP 500s and read timeouts."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
from sqlalchemy import update

from core.events import append_event
from core.models import File, Job

SUBSCRIBERS = 120
"""More than the pool (20 + 20 overflow) and the worker threads (40) together."""
DEADLINE_S = 60.0


def _job(db, project_id: str) -> str:
    f = File(project_id=project_id, purpose="preference", filename="p.parquet", bytes=1, sha256=str(time.time_ns()),
             format="parquet", storage_key="files/x")
    db.add(f)
    db.flush()
    job = Job(project_id=project_id, status="running", method="reward_model", model="org/name", training_file_id=f.id,
              spec={"method": {"type": "reward_model"}})
    db.add(job)
    db.commit()
    return job.id


def _subscribers(job_id: str) -> int:
    from api import streams

    return sum(h.subscriber_count(job_id) for h in list(streams._hubs.values()))


async def _storm(url: str, path: str, headers: dict[str, str], on_all_open) -> list[tuple[int, list[str]]]:
    opened = asyncio.Event()
    count = 0

    async def subscriber(http: httpx.AsyncClient) -> tuple[int, list[str]]:
        nonlocal count
        async with http.stream("GET", path, headers=headers) as r:
            count += 1
            if count == SUBSCRIBERS:
                opened.set()
            if r.status_code != 200:
                await r.aread()
                return r.status_code, []
            events: list[str] = []
            async for line in r.aiter_lines():
                if line.startswith("event: "):
                    events.append(line[len("event: "):])
                if line.startswith("data: ") and json.loads(line[len("data: "):])["type"] == "job.done":
                    break
            return r.status_code, events

    limits = httpx.Limits(max_connections=SUBSCRIBERS + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=httpx.Timeout(DEADLINE_S)) as http:
        tasks = [asyncio.create_task(subscriber(http)) for _ in range(SUBSCRIBERS)]  # all connect at once
        waiter = asyncio.create_task(opened.wait())
        done, _ = await asyncio.wait({waiter, *tasks}, timeout=DEADLINE_S, return_when=asyncio.FIRST_COMPLETED)
        if waiter in done:
            await asyncio.to_thread(on_all_open)
        return await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE_S)


def test_a_storm_of_stream_connects_is_served(live_server, auth, db, project_key):
    job = _job(db, project_key[0])

    def append_once_subscribed() -> None:
        deadline = time.monotonic() + DEADLINE_S
        while _subscribers(job) < SUBSCRIBERS and time.monotonic() < deadline:
            time.sleep(0.02)
        append_event(db, job, "job.log", {"message": "hello"})
        db.execute(update(Job).where(Job.id == job).values(status="succeeded"))
        append_event(db, job, "job.done", {"status": "succeeded"})

    started = time.monotonic()
    results = asyncio.run(_storm(live_server, f"/v1/jobs/{job}/events/stream", auth, append_once_subscribed))
    assert sorted({status for status, _ in results}) == [200]
    assert all(events == ["job.log", "job.done"] for _, events in results), results[:3]
    assert time.monotonic() - started < DEADLINE_S
