"""How soon a job created on the embedded stack (`make run`: SQLite, the embedded broker, local Ray)
reaches its worker, and `keel up` itself as a subprocess (shared with tests/embedded).

    python -m bench.embedded [--jobs 5] --json

Starts `keel up` with a fresh KEEL_HOME on a free port, uploads the demo SFT data, then creates
--jobs one-step SFT jobs one after another (each once the one before ended: the cluster has room)
and reads `keel up`'s log: for each job the seconds from the API's `job created` line to the
sweeper's `dispatched` line, and to the worker's `Task keel.run_job[...] received` line (the job on
its worker). Figures: median/min/max.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

from bench.common import emit, free_port, spread


@dataclass
class Stack:
    url: str
    key: str
    home: Path
    log: Path
    proc: subprocess.Popen

    def client(self, timeout: float = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def keel_up_env(home: Path, port: int, tz: str | None = None) -> dict[str, str]:
    """The environment `make run` gives `keel up`: no KEEL_ setting but KEEL_HOME and the ports chosen
    (no database, broker or Redis URL: the embedded defaults; none of a test session's settings). Serve's
    ingress gets a free port too, so stacks running side by side (test groups) never share 8100."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    env.update({"KEEL_HOME": str(home), "KEEL_PORT": str(port), "RAY_USAGE_STATS_ENABLED": "0",
                "KEEL_SERVE_URL": f"http://127.0.0.1:{free_port()}",
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONUNBUFFERED": "1"})
    if tz:
        env["TZ"] = tz
    return env


@contextmanager
def keel_up(home: Path, *, tz: str | None = None, extra_env: dict[str, str] | None = None,
            ready_timeout: float = 180.0) -> Iterator[Stack]:
    """`keel up` in a subprocess (its own process group) until the block ends; then SIGINT, as Ctrl-C."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**keel_up_env(home, port, tz), **(extra_env or {})}
    log = home / "keel-up.log"
    keel = Path(sys.executable).with_name("keel")
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(keel), "up"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    stack = Stack(f"http://127.0.0.1:{port}", "", home, log, proc)
    try:
        _wait_ready(stack, ready_timeout)
        stack.key = (home / "api_key").read_text().strip()
        yield stack
    finally:
        stop(stack)


def _wait_ready(stack: Stack, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stack.proc.poll() is not None:
            raise RuntimeError(f"keel up exited {stack.proc.returncode}:\n{stack.output()[-4000:]}")
        # The worker is ready (its sweeper sends jobs) and the API answers.
        if "ready." in stack.output():
            try:
                if httpx.get(f"{stack.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
        time.sleep(0.3)
    raise RuntimeError(f"keel up not ready after {timeout:.0f} s:\n{stack.output()[-4000:]}")


def stop(stack: Stack, timeout: float = 60.0) -> int | None:
    """SIGINT to `keel up` alone (as a terminal's Ctrl-C reaches it); its exit status. KILLs its group
    if it has not exited in `timeout`."""
    if stack.proc.poll() is None:
        stack.proc.send_signal(signal.SIGINT)
        try:
            stack.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(stack.proc.pid, signal.SIGKILL)
            stack.proc.wait(10)
    return stack.proc.returncode


def upload(client: httpx.Client, path: str | Path, purpose: str) -> str:
    with open(path, "rb") as f:
        r = client.post("/v1/files", files={"file": (Path(path).name, f)}, data={"purpose": purpose})
    r.raise_for_status()
    return r.json()["id"]


def wait_job(client: httpx.Client, job_id: str, statuses: tuple[str, ...] = ("succeeded", "failed", "cancelled"),
             timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").raise_for_status().json()
        if job["status"] in statuses:
            return job
        time.sleep(0.2)
    raise TimeoutError(f"job {job_id} still {job['status']} after {timeout:.0f} s")


TINY_SFT = {"type": "sft", "hyperparameters": {
    "max_token_len_per_gpu": 1024, "data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
    "trainer": {"total_training_steps": 1, "save_freq": 1, "test_freq": -1}}}
"""One step of SFT on the demo model: the smallest job that runs the whole path."""

_STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"


def dispatch_delays(log: str, job_ids: list[str]) -> list[tuple[float, float]]:
    """Per job: seconds from `job created` to the sweeper's send, and to the worker's `received`."""
    def at(stamp: str) -> datetime:  # the log's local wall clock: only differences are used
        return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")

    lines = log.splitlines()
    out = []
    for job_id in job_ids:
        created = sent = received = None
        for i, line in enumerate(lines):
            m = re.match(_STAMP, line)
            if not m:
                continue
            if created is None and "job created" in line and job_id in line:
                created = at(m.group(1))
            elif created is not None and sent is None and "dispatched" in line and job_id in line:
                sent = at(m.group(1))
            elif sent is not None and "Task keel.run_job[" in line and "received" in line:
                received = at(m.group(1))
                break
        if created is None or sent is None or received is None:
            raise RuntimeError(f"no created/dispatched/received lines for {job_id}")
        out.append(((sent - created).total_seconds(), (received - created).total_seconds()))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--tz", default=None, help="TZ for `keel up` (its log times are local)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from engine.demo import build_demo_assets

    with tempfile.TemporaryDirectory(prefix="keel-bench-embedded-") as tmp:
        home = Path(tmp) / "home"
        assets = build_demo_assets(home / "models" / "keel-demo")
        with keel_up(home, tz=args.tz) as stack, stack.client() as client:
            train = upload(client, assets["sft_train"], "sft")
            ids = []
            for _ in range(args.jobs):
                job = client.post("/v1/jobs", json={"model": assets["model"], "training_file": train,
                                                    "method": TINY_SFT}).raise_for_status().json()
                ids.append(job["id"])
                wait_job(client, job["id"])
            delays = dispatch_delays(stack.output(), ids)
    emit({"bench": "embedded_dispatch", "jobs": args.jobs,
          "create_to_sent_s": spread([d[0] for d in delays]),
          "create_to_worker_s": spread([d[1] for d in delays])}, args.json)


if __name__ == "__main__":
    main()
