"""A multi-node Ray cluster on loopback for the cluster tests, in a subprocess of its own.

`ray start` refuses a second node on one host while Ray is kept on loopback
(`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`), so the nodes come from Ray's own `ray.cluster_utils.Cluster`:
a head plus `add_node`, each a real raylet with its own node id, all on 127.0.0.1. The subprocess owns
the cluster and answers one JSON line per command on stdin (`nodes`, `kill <node_id>`, `add <cpus>`),
so a test can take a node down mid-job; closing stdin shuts the cluster down.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
           "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", "HF_HUB_OFFLINE": "1"}

_SCRIPT = r"""
import json, sys
from ray.cluster_utils import Cluster

cpus = [float(c) for c in sys.argv[1].split(",")]
args = {"include_dashboard": False, "node_ip_address": "127.0.0.1"}
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus[0], **args})
nodes = {cluster.head_node.node_id: cluster.head_node}
for n in cpus[1:]:
    node = cluster.add_node(num_cpus=n, **args)
    nodes[node.node_id] = node
cluster.wait_for_nodes()

def describe():
    return [{"node_id": i, "head": n is cluster.head_node, "alive": i in nodes} for i, n in nodes.items()]

print(json.dumps({"address": cluster.address, "nodes": describe()}), flush=True)
for line in sys.stdin:
    cmd, *rest = line.split()
    if cmd == "nodes":
        out = {"nodes": describe()}
    elif cmd == "kill":
        node = nodes.pop(rest[0])
        cluster.remove_node(node, allow_graceful=False)  # SIGKILL: raylet and its workers die at once
        out = {"killed": rest[0]}
    elif cmd == "add":
        node = cluster.add_node(num_cpus=float(rest[0]), **args)
        nodes[node.node_id] = node
        cluster.wait_for_nodes()
        out = {"added": node.node_id}
    else:
        out = {"error": cmd}
    print(json.dumps(out), flush=True)
cluster.shutdown()
"""


class RayNodes:
    """Head + workers with `cpus[i]` CPUs each; `address` is the head's GCS address."""

    def __init__(self, cpus: list[float], log: Path) -> None:
        env = {**os.environ, **RAY_ENV,
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        with open(log, "ab") as err:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, ",".join(map(str, cpus))], cwd=ROOT,
                                         env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, start_new_session=True)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="keel-ray-nodes").start()
        first = self._answer(180)
        self.address: str = first["address"]
        self.nodes: list[dict[str, Any]] = first["nodes"]

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)

    def _answer(self, timeout: float = 60) -> dict[str, Any]:
        try:
            return json.loads(self._lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"the Ray cluster process did not answer within {timeout} s "
                                 f"(exit code {self.proc.poll()})") from None

    def _ask(self, line: str, timeout: float = 60) -> dict[str, Any]:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._answer(timeout)

    @property
    def node_ids(self) -> list[str]:
        return [n["node_id"] for n in self.nodes]

    @property
    def head_id(self) -> str:
        return next(n["node_id"] for n in self.nodes if n["head"])

    def kill(self, node_id: str) -> None:
        """SIGKILL one node (its raylet and every worker process on it)."""
        self._ask(f"kill {node_id}")
        self.nodes = [n for n in self.nodes if n["node_id"] != node_id]

    def add(self, cpus: float) -> str:
        node_id = self._ask(f"add {cpus}", timeout=120)["added"]
        self.nodes.append({"node_id": node_id, "head": False, "alive": True})
        return node_id

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
                import signal

                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
