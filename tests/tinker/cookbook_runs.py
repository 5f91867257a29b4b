"""Running tinker-cookbook training loops against a live Keel as a user does: a child Python process
with command-line arguments only (`key=value`, `base_url`, a local model directory), the key in
`TINKER_API_KEY`, no route to the internet; then reading back its metrics log and the Keel trainer
behind its training client. Shared by the Tinker-room tests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx


def start(target: list[str], args: dict[str, object], key: str, log_path: Path) -> subprocess.Popen:
    """Start `python <target> key=value...` (target: `["-m", module]` or `[script]`) logging to log_path."""
    env = {**os.environ, "TINKER_API_KEY": key, "TINKER_TELEMETRY": "0", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    # The recipes fetch Thinking Machines' price list at start (a failure is only logged): a closed
    # loopback proxy keeps that off the network, while Keel on 127.0.0.1 is reached directly.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        env[name] = "http://127.0.0.1:9"
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.pop("TINKER_BASE_URL", None)  # only the command line says where Keel is
    argv = [sys.executable, *target, *(f"{k}={v}" for k, v in args.items()),
            f"log_path={log_path}", "behavior_if_log_dir_exists=delete"]
    out = open(f"{log_path}.out", "wb")  # noqa: SIM115 - closed when the process is reaped
    return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def finish(procs: dict[str, subprocess.Popen], log_root: Path, timeout_s: float) -> dict[str, dict]:
    """Wait for each run (killed past the shared deadline); per run its exit status, output's tail,
    metrics rows and the Tinker model id its training client got."""
    deadline = time.monotonic() + timeout_s
    out = {}
    for name, proc in procs.items():
        try:
            code = proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        log = log_root / name
        text = Path(f"{log}.out").read_text(errors="replace")
        metrics = log / "metrics.jsonl"
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.exists() else []
        model = re.search(r"TrainingClient initialized for model (\S+)", text)
        out[name] = {"code": code, "output": text[-6000:], "rows": rows, "model_id": model and model[1]}
    return out


def trainers(url: str, key: str) -> list[dict]:
    """The project's Keel trainers (the native API, with the Tinker key's Keel key)."""
    headers = {"Authorization": f"Bearer {key.removeprefix('tml-')}"}
    r = httpx.get(f"{url}/v1/trainers", params={"limit": 100}, headers=headers, timeout=30)
    r.raise_for_status()
    return r.json()["data"]


def trainer_operations(url: str, key: str, trainer_id: str) -> list[dict]:
    """The operations a Keel trainer ran, from its event log."""
    headers = {"Authorization": f"Bearer {key.removeprefix('tml-')}"}
    events = httpx.get(f"{url}/v1/trainers/{trainer_id}/events", params={"limit": 100}, headers=headers, timeout=30)
    events.raise_for_status()
    return [e["data"] for e in events.json()["data"] if e["type"] == "trainer.operation"]


def trainer(url: str, key: str, model_id: str | None) -> dict:
    """The Keel trainer behind a run's training client."""
    made = [t for t in trainers(url, key) if model_id and t["metadata"].get("tinker_model_id") == model_id]
    assert made, f"no Keel trainer for the run's model {model_id}"
    return made[0]
