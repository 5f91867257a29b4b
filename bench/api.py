"""Loopback load on the jobs API against a bare FastAPI + SQLAlchemy endpoint, and SSE fan-out lag.

    python -m bench.api [--rounds 3] [--concurrency 32] [--requests 3000] [--duration 10]
        [--subscribers 500] [--events 20] [--event-interval 0.5] [--server-workers 1] [--profile DIR] --json

Starts the service itself, on 127.0.0.1 only: a scratch PostgreSQL database (created on the local
server, migrated, dropped afterwards), Redis at redis://127.0.0.1:6379 (db 0 for event fan-out,
db 1 as broker), a scratch queue namespace so no worker picks the jobs up (its broker keys are
deleted afterwards), and `uvicorn api.main:app`. The rate limiter stays in the request path with a
limit it never reaches (and no cap on streams per key). Beside it, with the same uvicorn command,
`bench.bare_app` (one insert+commit endpoint and one select-by-id endpoint on a throwaway table of the
same scratch database): the floor for FastAPI + SQLAlchemy + psycopg on this machine.

Then --rounds rounds, Keel and the bare app alternating (the order flips every round), each phase
bounded by --requests and --duration, from --concurrency workers with a keep-alive connection each
(`bench.load`):

1. `POST /v1/jobs` (a small reward-model job on an uploaded demo file) / the bare insert (the same
   JSON body stored in a JSON column);
2. `GET /v1/jobs/{id}` on the jobs the round created / the bare select by id.

Per phase: req/s, p50/p99 latency, errors (non-2xx or transport errors), and the server's CPU time
per request (user + system of the server process and its children, divided by the requests it
answered; measured the same way for both apps). Per round: Keel's CPU per request over the bare
app's (`post_cpu_ratio`, `get_cpu_ratio`); over the rounds: their median/min/max.

3. SSE fan-out (skipped with --subscribers 0): --subscribers streams of
   `/v1/jobs/{id}/events/stream` on one job; once they are all connected, --events `job.log` events
   are appended with `core.events.append_event` (as a worker writes them: DB commit, then Redis
   publish) from a separate process, each stamped with its send time; lag = receive time - send time
   per subscriber and event (same host clock); delivered / expected, p50/p99 lag, errors.

--profile DIR: py-spy (`KEEL_BENCH_PY_SPY`, else `py-spy` on PATH) samples each server during the
first round's POST and GET phases and writes collapsed stacks to DIR (`keel_post.txt`, `keel_get.txt`,
`bare_post.txt`, `bare_get.txt`: the same stack below the handlers, so they compare frame by frame);
sampling costs the server CPU, so take figures from a run without it.

The load generator runs on the same 2 cores as the servers: figures are for the pair.
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
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, demo_assets, drop_database, emit, free_ports, load_average, percentile, spread
from bench.load import Connection, load, server_cpu_s

PG_ADMIN = os.environ.get("KEEL_BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("KEEL_BENCH_REDIS", "redis://127.0.0.1:6379")
TARGETS = {"post_cpu_ratio": 2.0, "get_cpu_ratio": 1.5, "p99_ms": 100, "post_req_per_s": 300, "sse_p99_lag_ms": 500}
"""Ratios: Keel's server CPU per request over the bare app's (median of the rounds); p99 at --concurrency."""


def _loopback(url: str) -> None:
    from urllib.parse import urlsplit

    host = urlsplit(url.replace("+psycopg", "")).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"bench.api targets loopback only, not {host!r}")


class Service:
    """Scratch database + environment + uvicorn (Keel's app, and the bare app beside it); `close()`
    undoes all of it."""

    def __init__(self, workers: int) -> None:
        for url in (PG_ADMIN, REDIS):
            _loopback(url)
        self.run = f"{os.getpid()}_{secrets.token_hex(3)}"
        self.db_name = f"keel_bench_{self.run}"
        self.db_url = PG_ADMIN.rsplit("/", 1)[0] + "/" + self.db_name
        self.home = Path(tempfile.mkdtemp(prefix=f"keel-bench-api-{self.run}-"))
        self.namespace = f"bench{self.run}."
        self.port, self.bare_port = free_ports(2)
        self.url, self.bare_url = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.bare_port}"
        self.workers = workers
        self.proc: subprocess.Popen | None = None
        self.bare_proc: subprocess.Popen | None = None
        self.created_db = False
        self.log_tail = ""

    def env(self) -> dict[str, str]:
        assets = demo_assets()
        return {
            "KEEL_ENV": "test", "KEEL_HOME": str(self.home), "KEEL_DATABASE_URL": self.db_url,
            "KEEL_REDIS_URL": f"{REDIS}/0", "KEEL_BROKER_URL": f"{REDIS}/1",
            "KEEL_QUEUE_NAMESPACE": self.namespace, "KEEL_STORAGE_URL": str(self.home / "artifacts"),
            "KEEL_MODEL_ROOTS": str(Path(assets["model"]).parent), "KEEL_RATE_LIMIT_PER_MINUTE": str(10**9),
            "KEEL_MAX_STREAMS_PER_KEY": "0",  # the fan-out phase holds --subscribers streams of one key
            "KEEL_LOG_LEVEL": "WARNING", "RAY_USAGE_STATS_ENABLED": "0",
        }

    def _serve(self, app: str, port: int, log_name: str, env: dict[str, str]) -> subprocess.Popen:
        """The same uvicorn command line for both apps."""
        log = open(self.home / log_name, "wb")  # noqa: SIM115 - the server writes it until close()
        return subprocess.Popen(
            [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
             "--workers", str(self.workers), "--log-level", "warning", "--no-access-log"],
            cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def start(self) -> str:
        """Create and migrate the database, make a project key, start both apps; returns the key."""
        from sqlalchemy import create_engine, text

        from bench import bare_app

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
        bare_app.create_table(self.db_url)
        with session_scope() as db:
            project, _ = get_or_create_project(db, "bench")
            key = create_api_key(db, project)
        self.proc = self._serve("api.main:app", self.port, "uvicorn.log", {})
        self.bare_proc = self._serve("bench.bare_app:app", self.bare_port, "bare.log",
                                     {bare_app.URL_ENV: self.db_url})
        self._wait_up(self.proc, f"{self.url}/healthz", 200, "uvicorn.log")
        self._wait_up(self.bare_proc, f"{self.bare_url}/items/none", 404, "bare.log")
        return key

    def _wait_up(self, proc: subprocess.Popen, url: str, status: int, log_name: str) -> None:
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"uvicorn exited: {(self.home / log_name).read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=1).status_code == status:
                    return
            time.sleep(0.2)
        raise SystemExit(f"uvicorn ({log_name}) did not answer within 60 s")

    @staticmethod
    def _stop(proc: subprocess.Popen | None) -> None:
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the group this bench started, no other
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def close(self) -> None:
        self._stop(self.proc)
        self._stop(self.bare_proc)
        with contextlib.suppress(Exception):
            import redis

            broker = redis.Redis.from_url(f"{REDIS}/1")
            keys = list(broker.scan_iter(match=f"*{self.namespace}*"))
            if keys:
                broker.delete(*keys)
        if self.created_db:
            drop_database(PG_ADMIN, self.db_name)
        with contextlib.suppress(OSError):
            self.log_tail = "".join((self.home / name).read_text(errors="replace")[-3000:]
                                    for name in ("uvicorn.log", "bare.log") if (self.home / name).exists())
        shutil.rmtree(self.home, ignore_errors=True)


def _job_body(file_id: str, model: str) -> dict:
    return {"model": model, "training_file": file_id,
            "method": {"type": "reward_model", "hyperparameters": {
                "data": {"train_batch_size": 16, "max_length": 128}, "trainer": {"total_training_steps": 10}}}}


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


class _Profiler:
    """py-spy sampling one process while a phase runs (`--profile`); a no-op without a directory."""

    def __init__(self, directory: str | None, pid: int | None) -> None:
        self.directory, self.pid = directory, pid
        self.exe = os.environ.get("KEEL_BENCH_PY_SPY") or shutil.which("py-spy")
        if directory and not self.exe:
            raise SystemExit("--profile needs py-spy (pip install py-spy, or KEEL_BENCH_PY_SPY=/path/to/py-spy)")

    @contextlib.asynccontextmanager
    async def phase(self, name: str, active: bool, pid: int | None = None):
        pid = pid or self.pid
        if not (self.directory and active and pid):
            yield
            return
        Path(self.directory).mkdir(parents=True, exist_ok=True)
        proc = await asyncio.create_subprocess_exec(
            self.exe, "record", "--pid", str(pid), "--subprocesses", "--gil", "--format", "raw", "--rate", "250",
            "--output", str(Path(self.directory) / f"{name}.txt"),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        await asyncio.sleep(1.0)  # py-spy attaches
        try:
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            await proc.wait()


def _ratio(keel: dict, bare: dict) -> float | None:
    k, b = keel["server_cpu_ms_per_req"], bare["server_cpu_ms_per_req"]
    return round(k / b, 3) if k and b else None


def _over_rounds(rounds: list[dict], phase: str) -> dict:
    return {key: spread([r[phase][key] for r in rounds])
            for key in ("server_cpu_ms_per_req", "req_per_s", "p50_ms", "p99_ms")
            if all(r[phase][key] is not None for r in rounds)}


async def run(url: str, key: str, args, server_pid: int | None = None, bare_url: str | None = None,
              bare_pid: int | None = None) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {key}"}
    assets = demo_assets()
    profiler = _Profiler(args.profile, server_pid)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        data = Path(assets["preference_train"]).read_bytes()  # a few KB, read before the load starts
        r = await client.post("/v1/files", data={"purpose": "preference"}, files={"file": ("bench.parquet", data)})
        r.raise_for_status()
    body = json.dumps(_job_body(r.json()["id"], assets["model"])).encode()
    bare_body = json.dumps({"name": "bench", "payload": _job_body(r.json()["id"], assets["model"])}).encode()
    keel, bare = Connection(url, headers), Connection(bare_url or url)
    for _ in range(3):  # warm-up: imports, connection pools, first queries
        job_id = (await keel.request("POST", "/v1/jobs", body)).json()["id"]
        assert (await keel.request("GET", f"/v1/jobs/{job_id}")).status_code == 200
        if bare_url:
            item_id = (await bare.request("POST", "/items", bare_body)).json()["id"]
            assert (await bare.request("GET", f"/items/{item_id}")).status_code == 200
    keel.close()
    bare.close()

    async def create(c, i):
        return await c.request("POST", "/v1/jobs", body)

    async def insert(c, i):
        return await c.request("POST", "/items", bare_body)

    def run_load(to_keel: bool, make_request):
        connect = (lambda: Connection(url, headers)) if to_keel else (lambda: Connection(bare_url))
        return load(connect, args.concurrency, args.requests, args.duration, make_request,
                    server_pid if to_keel else bare_pid)

    rounds = []
    for n in range(args.rounds):
        order = (True, False) if n % 2 == 0 or not bare_url else (False, True)  # alternate which goes first
        out: dict = {}
        for to_keel in order:
            if to_keel:
                async with profiler.phase("keel_post", n == 0):
                    out["keel_post"] = await run_load(True, create)
            elif bare_url:
                async with profiler.phase("bare_post", n == 0, bare_pid):
                    out["bare_insert"] = await run_load(False, insert)
        ids = [res.json()["id"] for res in out["keel_post"].pop("_results")]
        if not ids:
            raise SystemExit(f"no job could be created: {out['keel_post']}")
        items = [res.json()["id"] for res in out["bare_insert"].pop("_results")] if bare_url else []

        async def retrieve(c, i, ids=ids):
            return await c.request("GET", f"/v1/jobs/{ids[i % len(ids)]}")

        async def select_(c, i, items=items):
            return await c.request("GET", f"/items/{items[i % len(items)]}")

        for to_keel in order:
            if to_keel:
                async with profiler.phase("keel_get", n == 0):
                    out["keel_get"] = await run_load(True, retrieve)
            elif items:
                async with profiler.phase("bare_get", n == 0, bare_pid):
                    out["bare_select"] = await run_load(False, select_)
        for phase in out.values():
            phase.pop("_results", None)
        if bare_url:
            out["post_cpu_ratio"] = _ratio(out["keel_post"], out["bare_insert"])
            out["get_cpu_ratio"] = _ratio(out["keel_get"], out["bare_select"])
        rounds.append(out)
    job_id = ids[0]
    result: dict = {"rounds": rounds}
    for phase in ("keel_post", "keel_get", "bare_insert", "bare_select"):
        if phase in rounds[0]:
            result[phase] = _over_rounds(rounds, phase)
    for ratio in ("post_cpu_ratio", "get_cpu_ratio"):
        values = [r[ratio] for r in rounds if r.get(ratio) is not None]
        result[ratio] = spread(values) if values else None
    if args.subscribers <= 0:
        return result
    sse_limits = httpx.Limits(max_connections=args.subscribers + 10, max_keepalive_connections=0)
    timeout = httpx.Timeout(30, read=args.events * args.event_interval + 60)
    async with httpx.AsyncClient(limits=sse_limits, timeout=timeout) as sse_client:
        result["sse"] = await _fan_out(sse_client, url, headers, job_id, args.subscribers, args.events,
                                       args.event_interval, timeout=args.events * args.event_interval + 60,
                                       connect_concurrency=args.connect_concurrency, server_pid=server_pid)
    return result


def _targets(figures: dict) -> dict:
    post, get, sse = figures.get("post_cpu_ratio"), figures.get("get_cpu_ratio"), figures.get("sse")
    errors = sum(p["errors"] for r in figures["rounds"] for k, p in r.items() if isinstance(p, dict))
    met = {"post_cpu_ratio": post is not None and post["median"] <= TARGETS["post_cpu_ratio"],
           "get_cpu_ratio": get is not None and get["median"] <= TARGETS["get_cpu_ratio"],
           "post_p99_ms": figures["keel_post"]["p99_ms"]["median"] < TARGETS["p99_ms"],
           "get_p99_ms": figures["keel_get"]["p99_ms"]["median"] < TARGETS["p99_ms"],
           "post_req_per_s": figures["keel_post"]["req_per_s"]["median"] >= TARGETS["post_req_per_s"]}
    if sse is not None:
        errors += sse["errors"]
        met["sse_p99_lag_ms"] = sse["lag_p99_ms"] is not None and sse["lag_p99_ms"] < TARGETS["sse_p99_lag_ms"]
    met["zero_errors"] = errors == 0
    return met


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="Keel / bare rounds, alternating")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--requests", type=int, default=3000, help="per phase")
    p.add_argument("--duration", type=float, default=10.0, help="max seconds per phase")
    p.add_argument("--subscribers", type=int, default=500, help="SSE subscribers (0: no SSE phase)")
    p.add_argument("--events", type=int, default=20)
    p.add_argument("--event-interval", type=float, default=0.5,
                   help="seconds between appended events (0.5: a fast job reporting a metrics event per step)")
    p.add_argument("--connect-concurrency", type=int, default=16,
                   help="SSE subscribers connecting at once (0: all at once, a connection storm)")
    p.add_argument("--server-workers", type=int, default=1, help="uvicorn worker processes (both apps)")
    p.add_argument("--profile", metavar="DIR", help="py-spy both servers in round 1 (collapsed stacks in DIR)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")

    service = Service(args.server_workers)
    load_avg = load_average()
    try:
        key = service.start()
        figures = asyncio.run(run(service.url, key, args, service.proc.pid, service.bare_url, service.bare_proc.pid))
    finally:
        service.close()
    met = _targets(figures)
    if not met["zero_errors"]:
        print(f"server log tail:\n{service.log_tail}", file=sys.stderr)
    result = {"bench": "api", "concurrency": args.concurrency, "server_workers": args.server_workers,
              "rounds_run": args.rounds, **figures, "load_avg_1m": load_avg, "load_avg_1m_after": load_average(),
              "targets": TARGETS, "targets_met": met}
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
