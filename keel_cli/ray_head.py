"""The Ray head `keel up` runs on loopback: one cluster for the worker's jobs and for Serve, so a serving
replica's CPUs are missing from the free capacity admission reads (docs/inference.md, "Sharing the
cluster with training").

`ray start --head --block` in a session of its own, its output in a log file: TERM to it takes its GCS,
raylet and Ray workers down with it. Never imports ray: `keel up` runs the API in its own process.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
                # Drain-before-stop is for rolling upgrades behind a proxy; here it only delays Ctrl-C.
                "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
# Every port Ray would otherwise take at a fixed default, chosen free: stacks side by side never clash.
_PORT_FLAGS = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
               "metrics-export-port", "node-manager-port", "object-manager-port")
_STARTED = "Ray runtime started"


@dataclass
class RayHead:
    address: str
    proc: subprocess.Popen
    log: Path


def environment(address: str) -> dict[str, str]:
    """The environment of every process on `keel up`'s Ray (the head, the worker, `keel serve`): kept
    on loopback, and token authentication off unless the user chose a mode (Ray turns it on whenever
    `~/.ray/auth_token` exists, and the three must agree)."""
    env = {**os.environ, **LOOPBACK_ENV, "KEEL_RAY_ADDRESS": address}
    env.setdefault("RAY_AUTH_MODE", "disabled")
    return env


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start(port: int, num_cpus: int, log: Path, env: dict[str, str], timeout: float = 120.0) -> RayHead:
    """Start the head on 127.0.0.1:`port` with `num_cpus` CPUs; returns once Ray says it runs. Raises
    RuntimeError (the log's tail in its message) when it exits or is not up within `timeout`."""
    from engine.runtime.cluster import code_options

    # From a source checkout, every Ray worker on the node can import Keel, as its actors' runtime_env says.
    env = {**env, **code_options().get("runtime_env", {}).get("env_vars", {})}
    ports = dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS)), strict=True))
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--node-ip-address=127.0.0.1",
            f"--port={port}", f"--num-cpus={num_cpus}", "--include-dashboard=false", "--disable-usage-stats",
            *(f"--{flag}={p}" for flag, p in ports.items())]
    with open(log, "wb") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    head = RayHead(f"127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + timeout
    while _STARTED not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:]
            _kill(proc)
            raise RuntimeError(f"the local Ray did not start (exit code {proc.poll()}; log {log}):\n{tail}")
        time.sleep(0.2)
    return head


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
