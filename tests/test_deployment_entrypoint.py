"""docker/worker-entrypoint.sh really joins a Ray cluster as a node and stops cleanly (slow), and
refuses a node without explicit CPUs."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from deployment_files import ROOT, instructions

from bench.common import free_port


def _dockerfile_env(dockerfile: str) -> dict[str, str]:
    env = {}
    for instruction, args in instructions(dockerfile):
        if instruction == "ENV":
            env.update(dict(pair.split("=", 1) for pair in shlex.split(args)))
    return env


DRIVER = """
import os, signal, sys, time, ray
ray.init(address=os.environ["KEEL_RAY_ADDRESS"], log_to_driver=False)
def cpus():
    return ray.cluster_resources().get("CPU", 0)
print("JOINED", cpus(), sorted(n["NodeName"] for n in ray.nodes() if n["Alive"]), flush=True)
def stop(*_):  # the Ray node must still be up while the command shuts down
    print("STOPPING", cpus(), flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
time.sleep(600)
"""


@pytest.mark.slow
def test_worker_entrypoint_joins_the_cluster_as_a_ray_node_and_stops_cleanly(tmp_path):
    """A loopback Ray head, then the entrypoint with the image's environment: its node joins with the
    CPUs it was given, the command runs after it, and SIGTERM stops the command first, then the node."""
    port, short = free_port(), Path(tempfile.mkdtemp(prefix="kd", dir="/tmp"))  # Ray's sockets: <108 bytes
    ray_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16), "RAY_USAGE_STATS_ENABLED": "0"}
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "KEEL_"))}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base['PATH']}"
    head_log = (tmp_path / "head.log").open("w")
    head = subprocess.Popen(["ray", "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=0", "--num-gpus=0", "--include-dashboard=false",
                             f"--temp-dir={short / 'head'}", "--block"],
                            env={**base, **ray_env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
                            stdout=head_log, stderr=subprocess.STDOUT, start_new_session=True)
    node_log = tmp_path / "node.log"
    node = None
    try:
        head_text = (tmp_path / "head.log").read_text
        _wait_for(lambda: "Ray runtime started" in head_text(), 60, head, tmp_path / "head.log")
        # Ray rewrites 127.0.0.1 in an address into the host's public IP; a name for loopback keeps it local.
        env = {**base, **_dockerfile_env("docker/worker.Dockerfile"), **ray_env,
               "KEEL_RAY_ADDRESS": f"{_loopback_alias()}:{port}", "RAY_NODE_NAME": "keel-worker-test"}
        node = subprocess.Popen([str(ROOT / "docker/worker-entrypoint.sh"), "--num-cpus=1", "--num-gpus=0",
                                 "--node-ip-address=127.0.0.2", f"--temp-dir={short / 'node'}", "--",
                                 sys.executable, "-c", DRIVER],
                                env=env, stdout=node_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        _wait_for(lambda: re.search(r"^JOINED ", node_log.read_text(), re.MULTILINE), 180, node, node_log)
        joined = next(line for line in node_log.read_text().splitlines() if line.startswith("JOINED"))
        assert joined.startswith("JOINED 1.0") and "keel-worker-test" in joined, joined
        node.send_signal(signal.SIGTERM)  # only the script: as Docker does with PID 1
        assert node.wait(timeout=90) == 0, node_log.read_text()[-3000:]
        log = node_log.read_text()
        # The command stopped while the node was still up...
        assert re.search(r"^STOPPING 1\.0", log, re.MULTILINE), log[-3000:]
        alive = _alive_nodes(env)  # ...then the node left the cluster; the head is still up
        assert len(alive) == 1 and "keel-worker-test" not in alive, log[-3000:]
    finally:
        for proc in (node, head):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        head_log.close()
        shutil.rmtree(short, ignore_errors=True)


def test_worker_entrypoint_refuses_a_node_without_explicit_cpus(tmp_path):
    out = subprocess.run([str(ROOT / "docker/worker-entrypoint.sh"), "--num-gpus=0", "--", "true"],
                         env={"PATH": os.environ["PATH"], "KEEL_RAY_ADDRESS": "ray-head:6379"},
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2 and "--num-cpus is required" in out.stderr


def _loopback_alias() -> str:
    """A host name for 127.0.0.1 other than `localhost` (which Ray rewrites), e.g. this host's name."""
    import socket

    for name in (socket.gethostname(), "localhost.localdomain", "ip6-localhost"):
        try:
            if socket.gethostbyname(name) == "127.0.0.1":
                return name
        except OSError:
            continue
    pytest.skip("no host name resolves to 127.0.0.1 besides localhost")


def _wait_for(condition, timeout: float, proc, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"timed out (exit code {proc.poll()}):\n{log.read_text()[-4000:]}")


def _alive_nodes(env: dict) -> list[str]:
    code = ("import json, os, ray; ray.init(address=os.environ['KEEL_RAY_ADDRESS'], log_to_driver=False, "
            "logging_level='ERROR'); print(json.dumps([n['NodeName'] for n in ray.nodes() if n['Alive']]))")
    alive: list[str] = []
    for _ in range(10):  # the head marks a node dead a moment after it drained
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             timeout=120, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
        alive = json.loads(out.stdout.strip().splitlines()[-1])
        if "keel-worker-test" not in alive:
            break
        time.sleep(1)
    return alive
