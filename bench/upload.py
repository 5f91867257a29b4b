"""Upload benchmark: the API process's memory growth and the throughput of one large parquet upload.

    python -m bench.upload [--size-mb 1024] [--database-url URL] [--workdir DIR] [--keep] --json

Writes a preference parquet file of about --size-mb (one row group at a time: bounded memory),
starts the API (uvicorn on 127.0.0.1, a temporary KEEL_HOME with SQLite unless --database-url),
streams the file to POST /v1/files with httpx, samples the API's RSS (psutil) every 20 ms, and
prints one JSON line. The target: under 100 MiB RSS growth for a 1 GiB upload.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import free_port

ROOT = Path(__file__).resolve().parent.parent
TARGET_GROWTH_MIB = 100
_ROW_GROUP_ROWS = 32_768  # ~35 MB per row group at ~1.1 KB per row
_SCHEMA = pa.schema([("prompt", pa.string()), ("chosen", pa.string()), ("rejected", pa.string()),
                     ("margin", pa.float64())])


def write_parquet(path: Path, size_bytes: int, seed: int = 0) -> int:
    """A preference file of at least `size_bytes`, uncompressed hex text of varied lengths; returns rows."""
    rng = random.Random(seed)
    text = os.urandom(4 * 1024**2).hex()  # 8 M chars to slice distinct cells from

    def cells(lo: int, hi: int) -> pa.Array:
        out = []
        for _ in range(_ROW_GROUP_ROWS):
            n = rng.randint(lo, hi)
            start = rng.randrange(0, len(text) - n)
            out.append(text[start:start + n])
        return pa.array(out, pa.string())

    rows = 0
    with pq.ParquetWriter(path, _SCHEMA, compression="none") as writer:
        while not path.exists() or path.stat().st_size < size_bytes:
            margin = pa.array([rng.random() for _ in range(_ROW_GROUP_ROWS)], pa.float64())
            writer.write_table(pa.table([cells(20, 300), cells(100, 800), cells(100, 800), margin],
                                        schema=_SCHEMA), row_group_size=_ROW_GROUP_ROWS)
            rows += _ROW_GROUP_ROWS
    return rows


def _api_env(home: Path, database_url: str, max_bytes: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update({"KEEL_HOME": str(home), "KEEL_DATABASE_URL": database_url, "KEEL_STORAGE_URL": "",
                "KEEL_MAX_UPLOAD_BYTES": str(max_bytes), "KEEL_RATE_LIMIT_PER_MINUTE": "0",
                "KEEL_LOG_LEVEL": "WARNING", "KEEL_ENV": "development"})
    return env


_SETUP = """
from core import migrate
from core.db import session_scope
from core.security import create_api_key, get_or_create_project
migrate.upgrade()
with session_scope() as db:
    project, _ = get_or_create_project(db, "bench-upload")
    print(create_api_key(db, project))
"""


def _multipart(path: Path, purpose: str) -> tuple[dict[str, str], int, object]:
    """Headers, length and a chunk generator for a streamed multipart body (the file is never loaded)."""
    boundary = uuid.uuid4().hex
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n{purpose}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    length = len(head) + path.stat().st_size + len(tail)

    def body():
        yield head
        with open(path, "rb") as f:
            while chunk := f.read(1024**2):
                yield chunk
        yield tail

    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", "Content-Length": str(length)}
    return headers, length, body()


class _RssSampler(threading.Thread):
    def __init__(self, pid: int, every_s: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.proc, self.every_s = psutil.Process(pid), every_s
        self.samples: list[tuple[float, int]] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.samples.append((time.perf_counter(), self.proc.memory_info().rss))
            time.sleep(self.every_s)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.samples.append((time.perf_counter(), self.proc.memory_info().rss))

    def peak(self, start: float = 0.0, end: float = float("inf")) -> int:
        return max((rss for t, rss in self.samples if start <= t <= end), default=0)


def run(size_mb: int, database_url: str = "", workdir: str | None = None, keep: bool = False) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-upload-", dir=workdir))
    server = None
    try:
        data = tmp / "bench.parquet"
        t0 = time.perf_counter()
        rows = write_parquet(data, size_mb * 1024**2)
        generate_s = time.perf_counter() - t0
        size = data.stat().st_size
        warm = tmp / "warm.parquet"
        pq.write_table(pq.ParquetFile(data).read_row_group(0).slice(0, 100), warm)

        env = _api_env(tmp / "home", database_url, max(2 * 1024**3, size + 1024**2))
        key = subprocess.run([sys.executable, "-c", _SETUP], cwd=ROOT, env=env, check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1]
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "uvicorn", "api.main:app", "--host", "127.0.0.1",
                                   "--port", str(port), "--log-level", "warning", "--no-access-log"],
                                  cwd=ROOT, env=env)
        base = f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base, timeout=None) as client:
            for _ in range(300):
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            else:
                raise RuntimeError("the API did not start")
            # Warm-up: the first upload pays for lazy imports and first-request allocations.
            headers, _, body = _multipart(warm, "preference")
            client.post("/v1/files", headers={**auth, **headers}, content=body).raise_for_status()
            time.sleep(0.5)
            baseline = psutil.Process(server.pid).memory_info().rss

            sampler = _RssSampler(server.pid)
            sampler.start()
            headers, length, body = _multipart(data, "preference")
            sent_at: list[float] = []

            def timed():
                yield from body
                sent_at.append(time.perf_counter())

            t0 = time.perf_counter()
            r = client.post("/v1/files", headers={**auth, **headers}, content=timed())
            total_s = time.perf_counter() - t0
            sampler.stop()
        if r.status_code != 201:
            raise RuntimeError(f"upload failed: {r.status_code} {r.text[:500]}")
        f = r.json()
        mib = 1024**2
        stream_s = (sent_at[0] - t0) if sent_at else total_s
        peak = sampler.peak()
        stream_peak, check_peak = sampler.peak(end=t0 + stream_s), sampler.peak(start=t0 + stream_s)
        return {
            "bench": "upload", "size_mb": round(size / mib, 1), "bytes": size, "rows": f["rows"],
            "rows_written": rows, "database": "sqlite" if not database_url else database_url.split(":")[0],
            "status": r.status_code, "generate_s": round(generate_s, 2), "upload_s": round(total_s, 2),
            "stream_s": round(stream_s, 2), "check_s": round(total_s - stream_s, 2),
            "mb_per_s": round(size / mib / total_s, 1), "stream_mb_per_s": round(size / mib / stream_s, 1),
            "rss_baseline_mib": round(baseline / mib, 1), "rss_peak_mib": round(peak / mib, 1),
            "rss_growth_mib": round((peak - baseline) / mib, 1), "target_growth_mib": TARGET_GROWTH_MIB,
            "rss_growth_streaming_mib": round((stream_peak - baseline) / mib, 1),
            "rss_growth_checking_mib": round((check_peak - baseline) / mib, 1),
            "ok": (peak - baseline) / mib < TARGET_GROWTH_MIB and f["bytes"] == size and length > size,
        }
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
        if keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mb", type=int, default=1024, help="Size of the generated parquet file (MiB).")
    p.add_argument("--database-url", default="", help="SQLAlchemy URL of a migrated-or-empty database "
                   "(default: a temporary SQLite file).")
    p.add_argument("--workdir", default=None, help="Where to put the temporary files (default: the temp dir).")
    p.add_argument("--keep", action="store_true", help="Keep the temporary directory.")
    p.add_argument("--json", action="store_true", help="Print one JSON line.")
    args = p.parse_args(argv)
    result = run(args.size_mb, args.database_url, args.workdir, args.keep)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['size_mb']} MiB, {result['rows']} rows: {result['mb_per_s']} MiB/s end to end "
              f"({result['stream_mb_per_s']} MiB/s streaming, {result['check_s']} s checking); API RSS "
              f"{result['rss_baseline_mib']} -> {result['rss_peak_mib']} MiB "
              f"(+{result['rss_growth_mib']}, target < {TARGET_GROWTH_MIB})")
    return result


if __name__ == "__main__":
    main()
