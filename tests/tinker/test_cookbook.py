"""tinker-cookbook recipes against a live Keel, as a user runs them: `python -m` with command-line
arguments only (a local model directory, local data, `base_url`), the key in `TINKER_API_KEY`. Each
recipe must finish its steps (its own metrics log says so) and leave a Keel trainer behind it that
took those optimizer steps."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

QUESTIONS = [(f"What is {a} + {b}?", str(a + b)) for a in range(3, 9) for b in range(2, 6)]
TIMEOUT_S = 420.0


def _chat_file(root: Path) -> Path:
    """Conversations in the cookbook's layout (`{"messages": [...]}` per line)."""
    path = root / "chat.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q},
                                                     {"role": "assistant", "content": a}]}) + "\n"
                            for q, a in QUESTIONS))
    return path


def _start(module: str, args: dict[str, object], key: str, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "TINKER_API_KEY": key, "TINKER_TELEMETRY": "0", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    # The recipes fetch Thinking Machines' price list at start (a failure is only logged): a closed
    # loopback proxy keeps that off the network, while Keel on 127.0.0.1 is reached directly.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        env[name] = "http://127.0.0.1:9"
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.pop("TINKER_BASE_URL", None)  # only the command line says where Keel is
    argv = [sys.executable, "-m", module, *(f"{k}={v}" for k, v in args.items()),
            f"log_path={log_path}", "behavior_if_log_dir_exists=delete"]
    out = open(f"{log_path}.out", "wb")  # noqa: SIM115 - closed when the process is reaped
    return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def recipes(tinker_url, tinker_key, base_model, tmp_path_factory) -> dict[str, dict]:
    """Both recipes, run at the same time (their imports and start-ups overlap; the worker runs their
    operations in turn); per recipe its exit status, output, metrics rows and Tinker model id."""
    root = tmp_path_factory.mktemp("cookbook")
    common = {"model_name": base_model, "renderer_name": "role_colon", "base_url": tinker_url, "lora_rank": 8}
    runs = {
        "chat_sl": ("tinker_cookbook.recipes.chat_sl.train", {
            **common, "dataset": _chat_file(root), "batch_size": 4, "max_steps": 3, "learning_rate": 1e-3}),
        "math_rl": ("tinker_cookbook.recipes.math_rl.train", {
            **common, "env": "arithmetic", "loss_fn": "importance_sampling", "groups_per_batch": 4,
            "group_size": 4, "max_steps": 2, "max_tokens": 4, "eval_every": 0}),
    }
    procs = {name: _start(module, args, tinker_key, root / name) for name, (module, args) in runs.items()}
    deadline = time.monotonic() + TIMEOUT_S
    out = {}
    for name, proc in procs.items():
        try:
            code = proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        log = root / name
        text = Path(f"{log}.out").read_text(errors="replace")
        metrics = log / "metrics.jsonl"
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.exists() else []
        model = re.search(r"TrainingClient initialized for model (\S+)", text)
        out[name] = {"code": code, "output": text[-6000:], "rows": rows, "model_id": model and model[1]}
    return out


def _trainer(url: str, key: str, model_id: str | None) -> dict:
    """The Keel trainer behind a recipe's training client."""
    r = httpx.get(f"{url}/v1/trainers?limit=100", headers={"Authorization": f"Bearer {key.removeprefix('tml-')}"},
                  timeout=30)
    r.raise_for_status()
    made = [t for t in r.json()["data"] if model_id and t["metadata"].get("tinker_model_id") == model_id]
    assert made, f"no Keel trainer for the recipe's model {model_id}"
    return made[0]


def test_chat_sl_recipe(recipes, tinker_url, tinker_key):
    run = recipes["chat_sl"]
    assert run["code"] == 0, run["output"]
    losses = {r["step"]: r["train_mean_nll"] for r in run["rows"] if "train_mean_nll" in r}
    assert sorted(losses) == [0, 1, 2], run["rows"]
    assert all(v > 0 for v in losses.values())
    trainer = _trainer(tinker_url, tinker_key, run["model_id"])
    assert trainer["step"] == 3 and trainer["tokens"] > 0  # Keel's own record of the three optimizer steps


def test_math_rl_recipe(recipes, tinker_url, tinker_key):
    run = recipes["math_rl"]
    assert run["code"] == 0, run["output"]
    steps = sorted({r["step"] for r in run["rows"] if "env/all/reward/total" in r})
    assert steps == [0, 1], run["rows"]
    trainer = _trainer(tinker_url, tinker_key, run["model_id"])
    assert trainer["step"] == 2 and trainer["tokens"] > 0
