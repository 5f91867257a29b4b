"""The processes and probes a fault test's deployment is made of: real processes on loopback that a
test can kill and start again.

- `PgProxy`: a TCP proxy (asyncio, in a thread of the test process) in front of the shared
  PostgreSQL; `outage()` drops every connection and refuses new ones until `restore()`. The shared
  cluster itself is never stopped.
- `RedisServer`: a private `redis-server` on a free port (broker and live fan-out, as deployed).
- `ApiServer`: `uvicorn api.main:app`; `Worker`: `celery -A workers.celery_app worker` with its
  sweeper. Each runs in its own process group, logging to a file, with the stack's environment.
- `RayProbe`: a Ray driver in a subprocess that answers "are the CPUs free?" and "is this actor
  alive?" about the session's Ray cluster (the test process may hold another Ray: the engine tests').

Every wait is bounded (`wait_until`).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from bench.common import free_port

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, *, interval: float = 0.1, what: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy (returned), for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# --- processes ------------------------------------------------------------------------------------

class Proc:
    """A subprocess in its own session (so its whole process group can be signalled), appending its
    output to `log`. `start()` again after `kill()` or `stop()` restarts it with the same command."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.proc: subprocess.Popen | None = None
        self._offset = 0
        self.starts = 0

    def start(self) -> None:
        """Start the process and wait until it serves."""
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        assert not self.alive(), f"{self.name} is already running"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.starts += 1
            out.write(f"\n===== {self.name} start #{self.starts} =====\n".encode())
            out.flush()
            self._offset = out.tell()
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self) -> None:
        """Block until the process serves (subclasses); raise with its log if it dies first."""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        """What this run (since the last start) wrote."""
        if not self.log.exists():
            return ""
        with open(self.log, "rb") as f:
            f.seek(self._offset)
            return f.read().decode(errors="replace")

    def full_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL the whole process group: a crash, nothing gets to clean up."""
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM the group (a graceful shutdown), SIGKILL after `grace` seconds."""
        if not self.alive():
            return
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()

    def _check_alive(self, what: str) -> None:
        if not self.alive():
            raise RuntimeError(f"{self.name} exited ({self.proc.returncode}) before {what}:\n{self.output()[-4000:]}")


class RedisServer(Proc):
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(workdir), "--protected-mode", "yes"]
        super().__init__("redis", argv, dict(os.environ), workdir / "redis.log")

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def ping(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1, socket_connect_timeout=1).ping())
        except redis.RedisError:
            return False

    def wait_ready(self) -> None:
        wait_until(lambda: self._check_alive("answering PING") or self.ping(), 20, what="redis-server")


class ApiServer(Proc):
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "uvicorn", "api.main:app", "--host", "127.0.0.1", "--port", str(self.port),
                "--timeout-graceful-shutdown", "2", "--log-level", "warning"]
        super().__init__("api", argv, env, log)

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/healthz", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self) -> None:
        wait_until(lambda: self._check_alive("serving") or self.healthy(), 60, interval=0.2, what="the API")


class Worker(Proc):
    """`celery worker` (prefork, concurrency 1) on the stack's queues, with its sweeper thread."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        argv = [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "-Q",
                f"{env['KEEL_QUEUE_NAMESPACE']}keel.jobs,{env['KEEL_QUEUE_NAMESPACE']}keel.control",
                "--pool=prefork", "--concurrency=1", "--loglevel=INFO", "--without-gossip", "--without-mingle",
                "--without-heartbeat", "-n", f"keel-faults-{os.getpid()}@%h"]
        super().__init__("worker", argv, env, log)

    def wait_ready(self) -> None:
        wait_until(lambda: self._check_alive("ready") or " ready." in self.output(), 120, interval=0.2,
                   what="the Celery worker")


# --- PostgreSQL behind a proxy that can fail ---------------------------------------------------------

class PgProxy:
    """Forwards 127.0.0.1:`port` to the real server. `outage()`: every open connection is reset and new
    ones are accepted and reset at once (clients see the server go away) until `restore()`."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.refused = 0
        self._down = False
        self._conns: set[asyncio.Transport] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="keel-pg-proxy")
        self._server: asyncio.Server | None = None

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.upstream), 5)
        except (OSError, TimeoutError):
            writer.transport.abort()
            return
        ends = (writer.transport, up_writer.transport)
        self._conns.update(ends)
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for end in ends:
                end.abort()
                self._conns.discard(end)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.transport.abort()

    def outage(self) -> None:
        def drop() -> None:
            self._down = True
            for transport in list(self._conns):
                transport.abort()

        self._loop.call_soon_threadsafe(drop)

    def restore(self) -> None:
        def up() -> None:
            self._down = False

        self._loop.call_soon_threadsafe(up)

    def close(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for transport in list(self._conns):
                transport.abort()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


# --- Ray, seen from outside -----------------------------------------------------------------------

_PROBE = """
import json, sys, ray
ray.init(address=sys.argv[1], namespace="keel", log_to_driver=False)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "cpus":
        out = {"total": ray.cluster_resources().get("CPU", 0.0), "free": ray.available_resources().get("CPU", 0.0)}
    elif cmd in ("actor", "kill"):
        try:
            actor = ray.get_actor(arg, namespace="keel")
            if cmd == "kill":
                ray.kill(actor, no_restart=True)
            out = {"alive": True}
        except ValueError:
            out = {"alive": False}
    else:
        out = {"error": cmd}
    print(json.dumps(out), flush=True)
"""


class RayProbe:
    """A Ray driver in a subprocess (this process may already be in another Ray: the engine tests')."""

    def __init__(self, address: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _PROBE, address], cwd=ROOT, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="keel-ray-probe").start()
        assert self._answer(60).get("ready")

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)

    def _answer(self, timeout: float = 30) -> dict[str, Any]:
        try:
            return json.loads(self._lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"the Ray probe did not answer within {timeout} s") from None

    def _ask(self, line: str) -> dict[str, Any]:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def cpus(self) -> tuple[float, float]:
        """(total, free) CPUs of the cluster."""
        out = self._ask("cpus")
        return out["total"], out["free"]

    def actor_alive(self, name: str) -> bool:
        return self._ask(f"actor {name}")["alive"]

    def kill_actor(self, name: str) -> bool:
        """Kill the named actor (namespace `keel`) if it is alive; True if it was."""
        return self._ask(f"kill {name}")["alive"]

    def wait_all_free(self, timeout: float = 30) -> float:
        """Wait until every CPU of the cluster is free again; returns the total."""
        def free() -> float | None:
            total, available = self.cpus()
            return total if total > 0 and available == total else None

        return wait_until(free, timeout, interval=0.25, what="every Ray CPU to be free again")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
