"""The load generator of `bench.api`: keep-alive HTTP/1.1 connections, one request at a time each,
and the server's CPU time per request.

Why not httpx: on the 2-core development machine an httpx.AsyncClient spent 5-6.5 ms of client CPU
per request, more than the server it measured (2-4 ms for the bare endpoints), so throughput and
latency were the client's. A connection here writes the request and reads the status line, the
headers and a `Content-Length` body, nothing else (no TLS, no chunked bodies, no redirects): what a
local uvicorn answers to JSON requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from bench.common import percentile


@dataclass(frozen=True)
class Answer:
    status_code: int
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


class Connection:
    """One keep-alive connection to `base_url`, sending `headers` with every request."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None) -> None:
        url = urlsplit(base_url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.head = f"Host: {self.host}:{self.port}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes | None = None) -> Answer:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        try:
            return await self._exchange(method, path, body)
        except BaseException:
            self.close()  # a half-read answer leaves the connection unusable
            raise

    async def _exchange(self, method: str, path: str, body: bytes | None) -> Answer:
        assert self.reader is not None and self.writer is not None
        head = f"{method} {path} HTTP/1.1\r\n{self.head}"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode("latin-1") + b"\r\n" + (body or b""))
        lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length, close = 0, False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding":
                raise ValueError(f"unsupported transfer-encoding {value.strip()!r}")
            elif name == "connection" and "close" in value.lower():
                close = True
        content = await self.reader.readexactly(length) if length else b""
        if close:
            self.close()
        return Answer(status, content)

    def close(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
        self.reader = self.writer = None


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


async def load(connect: Callable[[], Connection], concurrency: int, total: int, duration: float,
               make_request: Callable[[Connection, int], Awaitable[Answer]], server_pid: int | None = None) -> dict:
    """`total` requests (at most `duration` seconds) from `concurrency` workers, a connection each;
    latency per request, and the server's and this process's CPU time per request (the server's is
    what its request path costs, whatever else runs on the machine)."""
    latencies: list[float] = []
    errors: list[str] = []
    results: list[Answer] = []
    issued = 0
    deadline = time.perf_counter() + duration

    async def worker() -> None:
        nonlocal issued
        conn = connect()
        try:
            while issued < total and time.perf_counter() < deadline:
                i = issued
                issued += 1
                start = time.perf_counter()
                try:
                    response = await make_request(conn, i)
                except Exception as exc:  # noqa: BLE001 - every failure is counted, none stops the load
                    errors.append(type(exc).__name__)
                    continue
                latencies.append(time.perf_counter() - start)
                if response.status_code >= 300:
                    errors.append(str(response.status_code))
                else:
                    results.append(response)
        finally:
            conn.close()

    start = time.perf_counter()
    cpu_before, client_before = server_cpu_s(server_pid), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    cpu, client = server_cpu_s(server_pid) - cpu_before, time.process_time() - client_before
    done = len(latencies)
    return {"server_cpu_ms_per_req": round(cpu / done * 1e3, 3) if done and server_pid else None,
            "client_cpu_ms_per_req": round(client / done * 1e3, 3) if done else None,
            "requests": done + sum(1 for e in errors if not e.isdigit()),
            "req_per_s": round(done / elapsed, 1), "p50_ms": round(percentile(latencies, 50) * 1e3, 1),
            "p99_ms": round(percentile(latencies, 99) * 1e3, 1), "errors": len(errors),
            "error_kinds": sorted(set(errors))[:5], "seconds": round(elapsed, 2), "_results": results}
