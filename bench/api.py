"""Loopback load on the jobs API: create/retrieve throughput and latency, and SSE fan-out lag.

    python -m bench.api [--concurrency 32] [--requests 3000] [--duration 20] [--subscribers 500]
        [--events 20] [--event-interval 0.5] [--server-workers 1] --json

Starts the service itself, on 127.0.0.1 only: a scratch PostgreSQL database (created on the local
server, migrated, dropped afterwards), Redis at redis://127.0.0.1:6379 (db 0 for event fan-out,
db 1 as broker), a scratch queue namespace so no worker picks the jobs up (its broker keys are
deleted afterwards), and `uvicorn api.main:app`. The rate limiter stays in the request path with a
limit it never reaches. Then, each phase bounded by --requests and --duration:

1. `POST /v1/jobs` (a small reward-model job on an uploaded demo file) from --concurrency httpx
   async workers sharing one client: req/s, p50/p99 latency, errors (non-2xx or transport errors);
2. `GET /v1/jobs/{id}` on the created jobs, the same way;
3. SSE fan-out: --subscribers streams of `/v1/jobs/{id}/events/stream` on one job; once they are all
   connected, --events `job.log` events are appended with `core.events.append_event` (as a worker
   writes them: DB commit, then Redis publish) from a separate process, each stamped with its send
   time; lag = receive time - send time per subscriber and event (same host clock); delivered /
   expected, p50/p99 lag, errors.

The load generator runs on the same 2 cores as the server: figures are for the pair.
Environment: KEEL_BENCH_PG_ADMIN_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/postgres),
KEEL_BENCH_REDIS (default redis://127.0.0.1:6379).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, demo_assets, emit, load_average, percentile

PG_ADMIN = os.environ.get("KEEL_BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("KEEL_BENCH_REDIS", "redis://127.0.0.1:6379")
TARGETS = {"post_req_per_s": 300, "post_p99_ms": 100, "sse_p99_lag_ms": 500}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback(url: str) -> None:
    from urllib.parse import urlsplit

    host = urlsplit(url.replace("+psycopg", "")).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"bench.api targets loopback only, not {host!r}")


class Service:
    """Scratch database + environment + uvicorn; `close()` undoes all of it."""

    def __init__(self, workers: int) -> None:
        for url in (PG_ADMIN, REDIS):
            _loopback(url)
        self.run = f"{os.getpid()}_{secrets.token_hex(3)}"
        self.db_name = f"keel_bench_{self.run}"
        self.home = Path(tempfile.mkdtemp(prefix=f"keel-bench-api-{self.run}-"))
        self.namespace = f"bench{self.run}."
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers = workers
        self.proc: subprocess.Popen | None = None
        self.created_db = False
        self.log_tail = ""

    def env(self) -> dict[str, str]:
        assets = demo_assets()
        return {
            "KEEL_ENV": "test", "KEEL_HOME": str(self.home),
            "KEEL_DATABASE_URL": PG_ADMIN.rsplit("/", 1)[0] + "/" + self.db_name,
            "KEEL_REDIS_URL": f"{REDIS}/0", "KEEL_BROKER_URL": f"{REDIS}/1",
            "KEEL_QUEUE_NAMESPACE": self.namespace, "KEEL_STORAGE_URL": str(self.home / "artifacts"),
            "KEEL_MODEL_ROOTS": str(Path(assets["model"]).parent), "KEEL_RATE_LIMIT_PER_MINUTE": str(10**9),
            "KEEL_LOG_LEVEL": "WARNING", "RAY_USAGE_STATS_ENABLED": "0",
        }

    def start(self) -> str:
        """Create and migrate the database, make a project key, start uvicorn; returns the key."""
        from sqlalchemy import create_engine, text

        os.environ.update(self.env())  # before anything imports core.config
        admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.db_name}"'))
        admin.dispose()
        self.created_db = True
        from core import migrate
        from core.db import session_scope
        from core.security import create_api_key, get_or_create_project

        migrate.upgrade()
        with session_scope() as db:
            project, _ = get_or_create_project(db, "bench")
            key = create_api_key(db, project)
        log = open(self.home / "uvicorn.log", "wb")  # noqa: SIM115 - the server writes it until close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "api.main:app", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", str(self.workers), "--log-level", "warning", "--no-access-log"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"uvicorn exited: {(self.home / 'uvicorn.log').read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return key
            time.sleep(0.2)
        raise SystemExit("uvicorn did not become healthy within 60 s")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)  # the group this bench started, no other
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        with contextlib.suppress(Exception):
            import redis

            broker = redis.Redis.from_url(f"{REDIS}/1")
            keys = list(broker.scan_iter(match=f"*{self.namespace}*"))
            if keys:
                broker.delete(*keys)
        if self.created_db:
            from sqlalchemy import create_engine, text

            with contextlib.suppress(Exception):
                from core.db import get_engine

                get_engine().dispose()
            admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": self.db_name})
                conn.execute(text(f'DROP DATABASE IF EXISTS "{self.db_name}"'))
            admin.dispose()
        import shutil

        with contextlib.suppress(OSError):
            self.log_tail = (self.home / "uvicorn.log").read_text(errors="replace")[-4000:]
        shutil.rmtree(self.home, ignore_errors=True)


def _job_body(file_id: str, model: str) -> dict:
    return {"model": model, "training_file": file_id,
            "method": {"type": "reward_model", "hyperparameters": {
                "data": {"train_batch_size": 16, "max_length": 128}, "trainer": {"total_training_steps": 10}}}}


def server_cpu_s(pid: int | None) -> float:
    """CPU seconds used so far by the server process and its children (uvicorn workers)."""
    if pid is None:
        return 0.0
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = proc.cpu_times()
            total += t.user + t.system
    return total


async def _load(client, concurrency: int, total: int, duration: float, make_request,
                server_pid: int | None = None) -> dict:
    """`total` requests (at most `duration` seconds) from `concurrency` workers; latency per request,
    and the server's CPU time per request (what the request path costs, whatever else runs here)."""
    latencies: list[float] = []
    errors: list[str] = []
    results: list = []
    issued = 0
    deadline = time.perf_counter() + duration

    async def worker() -> None:
        nonlocal issued
        while issued < total and time.perf_counter() < deadline:
            i = issued
            issued += 1
            start = time.perf_counter()
            try:
                response = await make_request(client, i)
            except Exception as exc:  # noqa: BLE001 - every failure is counted, none stops the load
                errors.append(type(exc).__name__)
                continue
            latencies.append(time.perf_counter() - start)
            if response.status_code >= 300:
                errors.append(str(response.status_code))
            else:
                results.append(response)

    start = time.perf_counter()
    cpu_before = server_cpu_s(server_pid)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    cpu = server_cpu_s(server_pid) - cpu_before
    done = len(latencies)
    return {"server_cpu_ms_per_req": round(cpu / done * 1e3, 2) if done and server_pid else None,
            "requests": len(latencies) + sum(1 for e in errors if not e.isdigit()),
            "req_per_s": round(len(latencies) / elapsed, 1), "p50_ms": round(percentile(latencies, 50) * 1e3, 1),
            "p99_ms": round(percentile(latencies, 99) * 1e3, 1), "errors": len(errors),
            "error_kinds": sorted(set(errors))[:5], "seconds": round(elapsed, 2), "_results": results}


_APPENDER = """
import sys, time
from core.db import session_scope
from core.events import append_event
job_id, n, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
for i in range(n):
    with session_scope() as db:
        append_event(db, job_id, "job.log", {"message": f"bench {i}", "bench_i": i, "sent_at": time.time()})
    time.sleep(interval)
"""


async def _fan_out(client, url: str, headers: dict, job_id: str, subscribers: int, events: int,
                   interval: float, timeout: float, connect_concurrency: int, server_pid: int | None) -> dict:
    """`subscribers` SSE streams on one job (at most `connect_concurrency` connecting at once, 0: all);
    `events` appended by a separate process; lag per delivery."""
    gate = asyncio.Semaphore(connect_concurrency or subscribers)
    lags: list[float] = []
    errors: list[str] = []
    connected = 0
    all_connected = asyncio.Event()

    async def subscriber() -> None:
        nonlocal connected
        seen = 0
        failed = False
        holding = False
        try:
            await gate.acquire()
            holding = True
            async with client.stream("GET", f"{url}/v1/jobs/{job_id}/events/stream", headers=headers) as r:
                gate.release()
                holding = False
                if r.status_code != 200:
                    failed = True
                    errors.append(str(r.status_code))
                    return
                connected += 1
                if connected == subscribers:
                    all_connected.set()
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    received = time.time()
                    data = json.loads(line[5:]).get("data") or {}
                    if "sent_at" in data:
                        lags.append(received - data["sent_at"])
                        seen += 1
                        if data.get("bench_i") == events - 1:
                            break
        except Exception as exc:  # noqa: BLE001
            failed = True
            errors.append(type(exc).__name__)
        finally:
            if holding:
                gate.release()
            if seen < events and not failed:
                errors.append("missed events")

    tasks = [asyncio.create_task(subscriber()) for _ in range(subscribers)]
    connect_start = time.perf_counter()
    try:
        await asyncio.wait_for(all_connected.wait(), timeout=60)
    except TimeoutError:
        errors.append(f"only {connected} of {subscribers} connected")
    connect_s = time.perf_counter() - connect_start
    await asyncio.sleep(1.0)  # let the last subscriptions reach the fan-out listener
    server_cpu, client_cpu, wall = server_cpu_s(server_pid), time.process_time(), time.perf_counter()
    appender = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _APPENDER, job_id, str(events), str(interval), cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for t in pending:
        t.cancel()
    if pending:
        errors.append(f"{len(pending)} subscribers timed out")
    await appender.wait()
    server_cpu, client_cpu = server_cpu_s(server_pid) - server_cpu, time.process_time() - client_cpu
    wall = time.perf_counter() - wall
    return {"subscribers": subscribers, "connect_concurrency": connect_concurrency, "connected": connected,
            "connect_s": round(connect_s, 2), "delivery_s": round(wall, 2),
            "server_cpu_share": round(server_cpu / wall, 2), "client_cpu_share": round(client_cpu / wall, 2),
            "events": events, "delivered": len(lags), "expected": subscribers * events,
            "lag_p50_ms": round(percentile(lags, 50) * 1e3, 1) if lags else None,
            "lag_p99_ms": round(percentile(lags, 99) * 1e3, 1) if lags else None,
            "lag_max_ms": round(max(lags) * 1e3, 1) if lags else None,
            "errors": len(errors), "error_kinds": sorted(set(errors))[:5]}


async def run(url: str, key: str, args, server_pid: int | None = None) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {key}"}
    assets = demo_assets()
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30) as client:
        data = Path(assets["preference_train"]).read_bytes()  # a few KB, read before the load starts
        r = await client.post("/v1/files", data={"purpose": "preference"}, files={"file": ("bench.parquet", data)})
        r.raise_for_status()
        body = _job_body(r.json()["id"], assets["model"])
        await client.post("/v1/jobs", json=body)  # warm-up: imports, connection pool, first queries

        async def create(c, i):
            return await c.post("/v1/jobs", json=body)

        post = await _load(client, args.concurrency, args.requests, args.duration, create, server_pid)
        ids = [res.json()["id"] for res in post.pop("_results")]
        if not ids:
            raise SystemExit(f"no job could be created: {post}")

        async def retrieve(c, i):
            return await c.get(f"/v1/jobs/{ids[i % len(ids)]}")

        get = await _load(client, args.concurrency, args.requests, args.duration, retrieve, server_pid)
        get.pop("_results")
        job_id = ids[0]
    sse_limits = httpx.Limits(max_connections=args.subscribers + 10, max_keepalive_connections=0)
    timeout = httpx.Timeout(30, read=args.events * args.event_interval + 60)
    async with httpx.AsyncClient(limits=sse_limits, timeout=timeout) as sse_client:
        sse = await _fan_out(sse_client, url, headers, job_id, args.subscribers, args.events,
                             args.event_interval, timeout=args.events * args.event_interval + 60,
                             connect_concurrency=args.connect_concurrency, server_pid=server_pid)
    return {"post_jobs": post, "get_job": get, "sse": sse}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--requests", type=int, default=3000, help="per phase (POST, GET)")
    p.add_argument("--duration", type=float, default=20.0, help="max seconds per phase")
    p.add_argument("--subscribers", type=int, default=500)
    p.add_argument("--events", type=int, default=20)
    p.add_argument("--event-interval", type=float, default=0.5,
                   help="seconds between appended events (0.5: a fast job reporting a metrics event per step)")
    p.add_argument("--connect-concurrency", type=int, default=16,
                   help="SSE subscribers connecting at once (0: all at once, a connection storm)")
    p.add_argument("--server-workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)

    service = Service(args.server_workers)
    load_avg = load_average()
    try:
        key = service.start()
        figures = asyncio.run(run(service.url, key, args, service.proc.pid))
    finally:
        service.close()
    post, sse = figures["post_jobs"], figures["sse"]
    if post["errors"] or sse["errors"] or figures["get_job"]["errors"]:
        print(f"server log tail:\n{service.log_tail}", file=sys.stderr)
    result = {"bench": "api", "concurrency": args.concurrency, "server_workers": args.server_workers,
              **figures, "load_avg_1m": load_avg,
              "targets_met": {"post_req_per_s": post["req_per_s"] >= TARGETS["post_req_per_s"],
                              "post_p99_ms": post["p99_ms"] < TARGETS["post_p99_ms"],
                              "sse_p99_lag_ms": sse["lag_p99_ms"] is not None
                              and sse["lag_p99_ms"] < TARGETS["sse_p99_lag_ms"],
                              "zero_errors": post["errors"] + figures["get_job"]["errors"] + sse["errors"] == 0}}
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
