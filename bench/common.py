"""What the Keel-side benchmarks share: demo assets, thread setup, the GEMM reference, statistics,
dropping a scratch database.

Nothing here is timed; it only prepares inputs and summarises outputs.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import struct
from collections.abc import Sequence
from math import prod
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def out_dir() -> Path:
    """Scratch space for generated assets (gitignored `bench/out`, or `$KEEL_BENCH_OUT`)."""
    return Path(os.environ.get("KEEL_BENCH_OUT") or ROOT / "bench" / "out")


def set_threads(threads: int | None) -> int:
    """Pin torch's intra-op threads (None: torch's default, one per core); returns the count in use."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def job_resources(threads: int | None, method: str):
    """The engine `Resources` of a benchmarked `method` job: `threads` CPUs per worker, or (None) a job's
    defaults, with `cpus_per_worker: auto` resolved as the service resolves it at job creation
    (`core.capacity.auto_cpus_per_worker`, with this deployment's `KEEL_AUTO_CPUS_PER_WORKER_MAX` and
    `KEEL_MAX_JOB_CPUS`) on a cluster of one idle node: this machine's usable cores. The engine sets
    torch's thread count from them (`engine.runtime.distributed.worker_threads`), as in a job."""
    import dataclasses

    from engine.config import Resources

    if threads is not None:
        return Resources(cpus_per_worker=float(threads))
    from core.capacity import Node, auto_cpus_per_worker
    from core.config import settings

    resources, cores = Resources(), usable_cores()
    spec = {"method": {"type": method}, "resources": dataclasses.asdict(resources)}
    cpus = auto_cpus_per_worker(spec, [Node("local", "127.0.0.1", cores, cores, 0.0, 0.0)],
                                cap=settings.AUTO_CPUS_PER_WORKER_MAX, max_cpus=settings.MAX_JOB_CPUS)
    return dataclasses.replace(resources, cpus_per_worker=float(cpus))


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform reports it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def tree_cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of process `pid` (default: this one) and of all its live
    descendants (Linux `/proc`; elsewhere this process's own `time.process_time`)."""
    import time

    root = pid or os.getpid()
    try:
        stats = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        # Fields after the parenthesised command name: state ppid ... utime(14) stime(15).
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:  # it exited meanwhile
                    continue
                stats[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    except FileNotFoundError:
        return time.process_time()
    children: dict[int, list[int]] = {}
    for p, (parent, _) in stats.items():
        children.setdefault(parent, []).append(p)
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        total += stats.get(p, (0, 0))[1]
        todo.extend(children.get(p, ()))
    return total / os.sysconf("SC_CLK_TCK")


def demo_assets(directory: str | os.PathLike | None = None) -> dict[str, str]:
    """The demo assets (`engine.demo.build_demo_assets`) under `directory`, built once and reused
    when its `assets.json` exists (default: `bench/out/demo`)."""
    out = Path(directory) if directory else out_dir() / "demo"
    index = out / "assets.json"
    if index.is_file():
        return {k: str(out / v) for k, v in json.loads(index.read_text()).items()}
    from engine.demo import build_demo_assets

    return build_demo_assets(out)


def _safetensors_shapes(path: Path) -> dict[str, list[int]]:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def matmul_params(model_dir: str, head: str) -> int:
    """Parameters that take part in matrix products per token: every weight of the model directory
    except the embedding table (a lookup, no FLOPs) and the LM head, plus the head the method uses
    (`lm_head`: the causal-LM head as stored; `score`: a 1-output head on the last hidden state).

    This is the `N` of the usual `6 * N * tokens` training-FLOP estimate (Kaplan et al. 2020 count
    non-embedding parameters); attention's `seq^2` term is left out, which understates FLOPs slightly.
    """
    shapes: dict[str, list[int]] = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        shapes.update(_safetensors_shapes(f))
    body = sum(prod(s) for k, s in shapes.items() if "embed_tokens" not in k and "lm_head" not in k
               and not k.startswith("score"))
    if head == "score":
        hidden = json.loads((Path(model_dir) / "config.json").read_text())["hidden_size"]
        return body + hidden
    return body + sum(prod(s) for k, s in shapes.items() if "lm_head" in k)


def gemm_peak_gflops(dtype: str, threads: int, size: int = 2048, repeats: int = 5) -> float:
    """The machine's dense matmul peak at the current thread count (see `bench.gemm`)."""
    from bench.gemm import measure

    set_threads(threads)
    return measure(dtype, size, repeats)


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of repeated measurements, and the relative spread (max - min) / median."""
    med = statistics.median(values)
    return {"median": round(med, 4), "min": round(min(values), 4), "max": round(max(values), 4),
            "spread": round((max(values) - min(values)) / med, 4) if med else 0.0, "n": len(values)}


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) by linear interpolation between order statistics."""
    if not values:
        return float("nan")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def drop_database(admin_url: str, name: str) -> None:
    """Drop the scratch database `name` a benchmark created: this process's pool is closed first, then
    any other session still on it (a server the benchmark started) is ended."""
    from sqlalchemy import create_engine, text

    with contextlib.suppress(Exception):
        from core.db import get_engine

        get_engine().dispose()
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": name})
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
    admin.dispose()


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that were free a moment ago, for the servers the benchmarks and
    the tests start. Every socket stays bound until all are chosen: binding and closing one at a time
    may hand the same port out twice (the tests' Ray refused to start when two of its components
    were given one port)."""
    import socket

    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def free_port() -> int:
    return free_ports(1)[0]


def load_average() -> float:
    """1-minute load average: how busy the machine was (other processes skew every figure)."""
    return round(os.getloadavg()[0], 2)


def emit(result: dict, as_json: bool) -> None:
    """Print one JSON line (`--json`) or `key: value` lines."""
    print(json.dumps(result) if as_json else "\n".join(f"{k}: {v}" for k, v in result.items()), flush=True)
