"""Per-key limits: the request budget is shared by every API process through Redis (and counted per
process without it), with `X-RateLimit-*` headers; concurrent event streams per key are capped; a
JSON body over the limit is a 413 before the server reads it."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import func, select

from api import ratelimit
from bench.common import free_port
from core.config import settings
from core.events import append_event
from core.models import Job

ROOT = Path(__file__).resolve().parents[2]


def _prefix() -> str:
    return f"keel:test:{time.time_ns()}"


# --- requests per minute ---------------------------------------------------------------------------

def test_every_answer_shows_the_budget(client, auth, monkeypatch):
    monkeypatch.setattr(settings, "RATE_LIMIT_PER_MINUTE", 50)
    monkeypatch.setattr(ratelimit, "rate_limiter", ratelimit.RateLimiter(settings.REDIS_URL, prefix=_prefix()))
    seen = []
    for _ in range(3):
        r = client.get("/v1/models", headers=auth)
        assert r.status_code == 200
        seen.append(int(r.headers["X-RateLimit-Remaining"]))
        assert r.headers["X-RateLimit-Limit"] == "50" and 0 <= int(r.headers["X-RateLimit-Reset"]) <= 60
    assert seen == [49, 48, 47]
    assert "X-RateLimit-Limit" not in client.get("/healthz").headers  # not a keyed request


def test_a_route_taking_the_project_and_the_caller_counts_one_request(client, auth, monkeypatch):
    """`CurrentProject` and `CurrentCaller` each authenticate, but a request is admitted (and counted)
    once: the second finds the first one's caller."""
    monkeypatch.setattr(settings, "RATE_LIMIT_PER_MINUTE", 50)
    monkeypatch.setattr(ratelimit, "rate_limiter", ratelimit.RateLimiter(settings.REDIS_URL, prefix=_prefix()))
    seen = []
    for _ in range(3):  # both dependencies, refused afterwards for its body
        r = client.post("/v1/fine_tuning/jobs", json={}, headers=auth)
        assert r.status_code == 400, r.text
        seen.append(int(r.headers["X-RateLimit-Remaining"]))
    assert seen == [49, 48, 47]
    assert ratelimit.rate_limiter.redis_calls == 3


def test_two_limiters_on_one_redis_share_the_budget():
    """What two API processes hold: separate limiter objects, one Redis."""
    prefix = _prefix()
    a, b = ratelimit.RateLimiter(settings.REDIS_URL, prefix=prefix), ratelimit.RateLimiter(settings.REDIS_URL,
                                                                                           prefix=prefix)
    answers = [(a if i % 2 else b).check("key-x", 4).allowed for i in range(6)]
    assert answers == [True, True, True, True, False, False]
    # Without Redis each process counts alone (embedded mode): twice the budget over two processes.
    c, d = ratelimit.RateLimiter(None), ratelimit.RateLimiter(None)
    assert [(c if i % 2 else d).check("key-x", 4).allowed for i in range(8)] == [True] * 8


def test_a_dead_redis_falls_back_to_counting_in_process_without_stalling():
    limiter = ratelimit.RateLimiter("redis://127.0.0.1:1/0", prefix=_prefix())
    started = time.monotonic()
    answers = [limiter.check("key-y", 3).allowed for _ in range(5)]
    assert answers == [True, True, True, False, False]
    assert time.monotonic() - started < 2 * ratelimit.REDIS_TIMEOUT_S + 1.0  # one failed try, then local


def test_the_event_loop_check_shares_the_budget_and_never_waits_on_a_silent_redis():
    """`acheck` (what API requests use) counts in the same Redis budget as `check`; a Redis that
    accepts connections and never answers costs one bounded wait, then the process counts alone."""
    import asyncio

    prefix = _prefix()
    shared = ratelimit.RateLimiter(settings.REDIS_URL, prefix=prefix)

    async def mixed():
        return [(await shared.acheck("key-z", 4)).allowed if i % 2 else shared.check("key-z", 4).allowed
                for i in range(6)]

    assert asyncio.run(mixed()) == [True, True, True, True, False, False]

    async def silent():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
        port = server.sockets[0].getsockname()[1]
        limiter = ratelimit.RateLimiter(f"redis://127.0.0.1:{port}/0", prefix=_prefix())
        started = time.monotonic()
        answers = [(await limiter.acheck("key-w", 2)).allowed for _ in range(4)]
        server.close()
        return answers, time.monotonic() - started

    answers, took = asyncio.run(silent())
    assert answers == [True, True, False, False]
    assert took < ratelimit.REDIS_TIMEOUT_S + 1.0  # one timed-out try, then local


# --- token leases (acheck) -----------------------------------------------------------------------

def _counted(prefix: str) -> int:
    """Requests Redis counted under `prefix` (one window: the current counter only)."""
    r = redis.Redis.from_url(settings.REDIS_URL)
    return sum(int(r.get(key) or 0) for key in r.scan_iter(f"{prefix}:*"))


def test_a_busy_key_takes_its_budget_in_leases_instead_of_a_round_trip_per_request():
    prefix = _prefix()
    limiter = ratelimit.RateLimiter(settings.REDIS_URL, prefix=prefix)

    async def one_by_one():
        return [await limiter.acheck("key-l", 100_000) for _ in range(1000)]

    budgets = asyncio.run(one_by_one())
    assert all(b.allowed for b in budgets)
    assert limiter.redis_calls <= 100, limiter.redis_calls  # up to MAX_LEASE a trip once the key is busy
    # Redis counted every admitted request, plus the unspent rest of the last lease.
    assert 1000 <= _counted(prefix) <= 1000 + ratelimit.MAX_LEASE - 1
    calls, counted = limiter.redis_calls, _counted(prefix)

    async def concurrently():  # 32 clients: the ones that find no tokens wait for the one lease in flight
        async def client():
            out = []
            for _ in range(40):
                out.append(await limiter.acheck("key-l", 100_000))
                await asyncio.sleep(0)
            return out
        return [b for batch in await asyncio.gather(*(client() for _ in range(32))) for b in batch]

    budgets = asyncio.run(concurrently())
    assert len(budgets) == 1280 and all(b.allowed for b in budgets)
    assert limiter.redis_calls - calls <= 1280 // 8, limiter.redis_calls - calls
    assert 1280 <= _counted(prefix) - counted <= 1280 + ratelimit.MAX_LEASE - 1


def test_leasing_processes_together_never_admit_more_than_the_limit():
    """Two limiters (two API processes) lease from one key's budget at once: together they admit at
    most the limit, and lose at most one lease's rest each (n - 1 <= 1% of the limit)."""
    prefix, limit = _prefix(), 1000
    a, b = (ratelimit.RateLimiter(settings.REDIS_URL, prefix=prefix) for _ in range(2))

    async def both():
        async def client(limiter):
            out = []
            for _ in range(100):
                out.append(await limiter.acheck("key-2", limit))
                await asyncio.sleep(0)
            return out
        return await asyncio.gather(*(client(a if i % 2 else b) for i in range(16)))

    budgets = [budget for batch in asyncio.run(both()) for budget in batch]
    admitted = sum(budget.allowed for budget in budgets)
    assert limit - 2 * (limit // 100 - 1) <= admitted <= limit, admitted
    assert _counted(prefix) <= limit
    # Both leased: each would make 800 round trips without leases (the 600 refusals take one each).
    assert a.redis_calls < 400 and b.redis_calls < 400 and a.redis_calls + b.redis_calls < 850, \
        (a.redis_calls, b.redis_calls)
    # A refused key holds no tokens: every further request asks Redis, and is refused.
    calls = a.redis_calls

    async def more():
        return [await a.acheck("key-2", limit) for _ in range(5)]

    assert [budget.allowed for budget in asyncio.run(more())] == [False] * 5
    assert a.redis_calls == calls + 5


def test_a_small_limit_or_sparse_traffic_asks_redis_for_every_request():
    """Exactly the results without leases: a limit under 200 a window, or a key quieter than a few
    requests per lease period, takes one request per round trip."""
    limiter = ratelimit.RateLimiter(settings.REDIS_URL, prefix=_prefix())

    async def small():
        return [await limiter.acheck("key-5", 5) for _ in range(7)]

    budgets = asyncio.run(small())
    assert [b.allowed for b in budgets] == [True] * 5 + [False] * 2
    assert [b.remaining for b in budgets] == [4, 3, 2, 1, 0, 0, 0]
    assert budgets[-1].headers()["Retry-After"] and limiter.redis_calls == 7
    sparse = ratelimit.RateLimiter(settings.REDIS_URL, prefix=_prefix(), lease_s=0.05)

    async def quiet():
        out = []
        for _ in range(5):
            out.append(await sparse.acheck("key-q", 100_000))
            await asyncio.sleep(0.12)
        return out

    assert [b.remaining for b in asyncio.run(quiet())] == [99_999, 99_998, 99_997, 99_996, 99_995]
    assert sparse.redis_calls == 5


def test_remaining_counts_down_with_leases_as_without(client, auth, monkeypatch):
    """One process alone: the exact sequence a round trip per request gives (the tokens it holds are
    added back to what Redis reports); beside another process: never going up."""
    limit = 20_000
    limiter = ratelimit.RateLimiter(settings.REDIS_URL, prefix=_prefix())
    monkeypatch.setattr(settings, "RATE_LIMIT_PER_MINUTE", limit)
    monkeypatch.setattr(ratelimit, "rate_limiter", limiter)
    seen = []
    for _ in range(150):
        r = client.get("/v1/models", headers=auth)
        assert r.status_code == 200 and 0 <= int(r.headers["X-RateLimit-Reset"]) <= 60
        seen.append(int(r.headers["X-RateLimit-Remaining"]))
    assert seen == list(range(limit - 1, limit - 151, -1))
    assert limiter.redis_calls < 75, limiter.redis_calls
    prefix = _prefix()
    a, b = (ratelimit.RateLimiter(settings.REDIS_URL, prefix=prefix) for _ in range(2))

    async def interleaved():
        out = []
        for i in range(900):
            budget = await (b if i % 3 == 0 else a).acheck("key-m", 3200)
            if i % 3:
                out.append(budget.remaining)
        return out

    remaining = asyncio.run(interleaved())
    assert all(x >= y for x, y in itertools.pairwise(remaining)), remaining
    assert remaining[-1] < 3200 - 600 and a.redis_calls < 300


def test_leased_tokens_expire_after_the_lease_period():
    prefix = _prefix()
    limiter = ratelimit.RateLimiter(settings.REDIS_URL, prefix=prefix, lease_s=0.2)

    async def run():
        admitted = 0
        while _counted(prefix) - admitted < 2:  # until this process holds at least 2 leased tokens
            assert (await limiter.acheck("key-e", 100_000)).allowed
            admitted += 1
            assert admitted < 500
        calls = limiter.redis_calls
        await limiter.acheck("key-e", 100_000)  # fresh: served here
        assert limiter.redis_calls == calls
        await asyncio.sleep(0.3)
        counted = _counted(prefix)
        budget = await limiter.acheck("key-e", 100_000)  # expired: Redis again; what was left stays counted
        assert limiter.redis_calls == calls + 1
        assert budget.allowed and budget.remaining == 100_000 - counted - 1

    asyncio.run(run())


def _start_api(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "api.main:app", "--host", "127.0.0.1",
                                 "--port", str(port), "--log-level", "warning"],
                                cwd=ROOT, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"API did not start: {log.read_text()[-2000:]}")


@pytest.mark.slow
@pytest.mark.parametrize("shared", [True, False], ids=["redis", "embedded"])
def test_two_api_processes_share_one_budget_through_redis(auth, keel_home, tmp_path, shared):
    env = {"KEEL_RATE_LIMIT_PER_MINUTE": "5", "KEEL_REDIS_URL": settings.REDIS_URL if shared else ""}
    procs = [_start_api(env, tmp_path / f"api{i}.log") for i in range(2)]
    # The windows are minutes aligned to the clock, and a sliding-window counter weighs the last one's
    # count by its share still inside, rounded down: requests straddling a minute's edge may get one
    # more than the limit. Start the burst (about a second) clear of the edge.
    if (second := time.time() % 60) > 50:
        time.sleep(61 - second)
    try:
        codes, remaining = [], []
        for i in range(12):
            r = httpx.get(f"{procs[i % 2][1]}/v1/models", headers=auth, timeout=10)
            codes.append(r.status_code)
            remaining.append(r.headers.get("X-RateLimit-Remaining"))
    finally:
        for proc, _ in procs:
            proc.terminate()
            proc.wait(10)
    if shared:  # one budget of 5 for the key, whichever process answers
        assert codes == [200] * 5 + [429] * 7, codes
        assert remaining[:5] == ["4", "3", "2", "1", "0"]
    else:  # the in-process fallback: each process has its own 5
        assert codes == [200] * 10 + [429] * 2, codes


# --- concurrent streams --------------------------------------------------------------------------

def _queued_job(db, project_id: str) -> str:
    from tests.api import job_requests

    job = Job(project_id=project_id, status="queued", method="sft", spec={"method": {"type": "sft"}},
              model="org/name", training_file_id=job_requests.make_file(db, project_id, "sft"))
    db.add(job)
    db.commit()
    return job.id


def test_streams_per_key_are_capped(live_server, auth, other_auth, db, project_key, monkeypatch):
    monkeypatch.setattr(settings, "MAX_STREAMS_PER_KEY", 2)
    job = _queued_job(db, project_key[0])
    url = f"{live_server}/v1/jobs/{job}/events/stream"
    with httpx.Client(timeout=10) as http:
        first = http.send(http.build_request("GET", url, headers=auth), stream=True)
        second = http.send(http.build_request("GET", url, headers=auth), stream=True)
        assert (first.status_code, second.status_code) == (200, 200)
        third = http.get(url, headers=auth)
        assert third.status_code == 429 and third.json()["code"] == "too_many_streams", third.text
        assert int(third.headers["Retry-After"]) >= 1
        # Another key has its own streams; ordinary requests of this key are not streams.
        other_job = _queued_job(db, _project_of(db, other_auth))
        assert http.get(f"{live_server}/v1/jobs/{other_job}", headers=other_auth).status_code == 200
        assert http.get(f"{live_server}/v1/jobs/{job}", headers=auth).status_code == 200
        first.close()
        deadline = time.monotonic() + 10  # the server notices the closed connection, then frees the slot
        while time.monotonic() < deadline:
            again = http.send(http.build_request("GET", url, headers=auth), stream=True)
            if again.status_code == 200:
                break
            again.close()
            time.sleep(0.2)
        assert again.status_code == 200
        # The job finishes: streams end and give their slots back.
        db.execute(Job.__table__.update().where(Job.id == job).values(status="succeeded"))
        append_event(db, job, "job.done", {"status": "succeeded"})
        for response in (second, again):
            assert "job.done" in response.read().decode()
            response.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and ratelimit.stream_slots._redis.zcard(f"keel:streams:{_key_id(db, auth)}"):
        time.sleep(0.1)
    assert ratelimit.stream_slots._redis.zcard(f"keel:streams:{_key_id(db, auth)}") == 0


def test_stream_slots_count_across_processes_and_expire():
    slots_a, slots_b = (ratelimit.StreamSlots(settings.REDIS_URL, prefix=p) for p in [_prefix()] * 2)
    slots_b.prefix = slots_a.prefix
    leases = [slots_a.acquire("key-s", 3), slots_b.acquire("key-s", 3), slots_a.acquire("key-s", 3)]
    assert all(leases) and slots_b.acquire("key-s", 3) is None
    slots_b.release(leases[0])
    assert slots_b.acquire("key-s", 3) is not None
    # A lease nobody renews (its process died) stops counting once it expires.
    key = slots_a._key("key-s")
    slots_a._redis.zadd(key, {lease.token: time.time() - 1 for lease in leases[1:]})
    assert slots_a.acquire("key-s", 3) is not None and slots_a.acquire("key-s", 3) is not None
    # Without Redis: counted in this process.
    local = ratelimit.StreamSlots(None)
    held = [local.acquire("k", 2), local.acquire("k", 2)]
    assert all(held) and local.acquire("k", 2) is None
    local.release(held[0])
    assert local.acquire("k", 2) is not None and local.acquire("k", 0) is not None  # 0 = no cap


def _project_of(db, headers) -> str:
    from core.security import authenticate

    return authenticate(db, headers["Authorization"].split()[1]).id


def _key_id(db, headers) -> str:
    from core.security import identify

    return identify(db, headers["Authorization"].split()[1]).key_id


# --- body size -----------------------------------------------------------------------------------

def _raw_request(url: str, head: str, body: bytes, *, timeout: float = 5.0) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + _length(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def _length(data: bytes) -> int:
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    return next((int(line.split(":", 1)[1]) for line in head.split("\r\n") if line.startswith("content-length:")), 0)


def test_a_declared_oversized_body_is_refused_before_it_is_sent(live_server, auth, db, project_key, monkeypatch):
    monkeypatch.setattr(settings, "MAX_JSON_BODY_BYTES", 1000)
    before = db.scalar(select(func.count()).select_from(Job).where(Job.project_id == project_key[0]))
    head = (f"POST /v1/jobs HTTP/1.1\r\nHost: test\r\nAuthorization: {auth['Authorization']}\r\n"
            "Content-Type: application/json\r\nContent-Length: 50000000\r\n")
    started = time.monotonic()
    # 10 bytes of a declared 50 MB: the answer comes without the rest (the socket would wait forever).
    answer = _raw_request(live_server, head, b'{"model": ')
    assert time.monotonic() - started < 5
    status_line, _, rest = answer.partition(b"\r\n")
    assert b" 413 " in status_line, answer[:300]
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert b"application/problem+json" in headers.lower() and b"x-request-id" in headers.lower()
    problem = json.loads(body)
    assert problem["code"] == "request_too_large" and problem["status"] == 413 and "1000" in problem["detail"]
    assert db.scalar(select(func.count()).select_from(Job).where(Job.project_id == project_key[0])) == before


def test_a_streamed_body_is_counted_as_it_arrives(live_server, auth, monkeypatch):
    monkeypatch.setattr(settings, "MAX_JSON_BODY_BYTES", 1000)
    sent = []

    def chunks():  # no Content-Length: chunked transfer encoding
        for _ in range(50):
            sent.append(400)
            yield b" " * 400

    r = httpx.post(f"{live_server}/v1/jobs", headers={**auth, "Content-Type": "application/json"},
                   content=chunks(), timeout=10)
    assert r.status_code == 413 and r.json()["code"] == "request_too_large", r.text
    # The same body under the limit goes through to validation (a 422 for a body of spaces).
    small = httpx.post(f"{live_server}/v1/jobs", headers={**auth, "Content-Type": "application/json"},
                       content=iter([b"{", b" " * 500, b"}"]), timeout=10)
    assert small.status_code == 422, small.text


def test_the_limit_spares_uploads_and_every_other_route_has_it(client, auth, monkeypatch):
    monkeypatch.setattr(settings, "MAX_JSON_BODY_BYTES", 1000)
    from tests.api.file_uploads import jsonl_bytes, upload

    data = jsonl_bytes([{"prompt": f"p{i} " * 20, "response": "r " * 20} for i in range(40)])
    assert len(data) > 1000
    r = upload(client, auth, data, filename="big.jsonl", purpose="sft")
    assert r.status_code == 201, r.text
    r = client.post("/v1/jobs/job-x/cancel", headers=auth, content=b"{" + b" " * 2000 + b"}")
    assert r.status_code == 413
    monkeypatch.setattr(settings, "MAX_JSON_BODY_BYTES", 10_000)
    assert client.post("/v1/jobs/job-x/cancel", headers=auth, content=b"{" + b" " * 2000 + b"}").status_code == 404
