"""tinker-cookbook recipes against a live Keel, as a user runs them: `python -m` with command-line
arguments only (a local model directory, local data, `base_url`), the key in `TINKER_API_KEY`. Each
recipe must finish its steps (its own metrics log says so) and leave a Keel trainer behind it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

QUESTIONS = [(f"What is {a} + {b}?", str(a + b)) for a in range(3, 9) for b in range(2, 6)]


@pytest.fixture(scope="module")
def chat_file(tmp_path_factory) -> Path:
    """Conversations in the cookbook's layout (`{"messages": [...]}` per line)."""
    path = tmp_path_factory.mktemp("cookbook") / "chat.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q},
                                                     {"role": "assistant", "content": a}]}) + "\n"
                            for q, a in QUESTIONS))
    return path


def _recipe(module: str, args: dict[str, object], key: str, log_path: Path, timeout: float) -> list[dict]:
    """Run the recipe to its end; the rows of its `metrics.jsonl`."""
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
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{module} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    metrics = log_path / "metrics.jsonl"
    assert metrics.exists(), f"{module} wrote no metrics:\n{proc.stderr[-4000:]}"
    return [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]


def _trainers(url: str, key: str) -> list[dict]:
    r = httpx.get(f"{url}/v1/trainers?limit=100", headers={"Authorization": f"Bearer {key.removeprefix('tml-')}"},
                  timeout=30)
    r.raise_for_status()
    return r.json()["data"]


def _new_trainer(url: str, key: str, before: set[str]) -> dict:
    """The trainer the recipe's training client was (a Keel trainer with its Tinker model id)."""
    made = [t for t in _trainers(url, key) if t["id"] not in before and t["metadata"].get("tinker_model_id")]
    assert made, "the recipe left no Keel trainer"
    return made[-1]


def test_chat_sl_recipe(tinker_url, tinker_key, base_model, chat_file, tmp_path):
    before = {t["id"] for t in _trainers(tinker_url, tinker_key)}
    rows = _recipe("tinker_cookbook.recipes.chat_sl.train", {
        "model_name": base_model, "dataset": chat_file, "renderer_name": "role_colon", "base_url": tinker_url,
        "batch_size": 4, "max_steps": 3, "lora_rank": 8, "learning_rate": 1e-3,
    }, tinker_key, tmp_path / "chat_sl", timeout=240)
    steps = sorted({r["step"] for r in rows if "train_mean_nll" in r})
    assert steps == [0, 1, 2], rows
    assert all(r["train_mean_nll"] > 0 for r in rows if "train_mean_nll" in r)
    trainer = _new_trainer(tinker_url, tinker_key, before)
    assert trainer["step"] == 3 and trainer["tokens"] > 0  # Keel's own record of the three optimizer steps


def test_math_rl_recipe(tinker_url, tinker_key, base_model, tmp_path):
    before = {t["id"] for t in _trainers(tinker_url, tinker_key)}
    rows = _recipe("tinker_cookbook.recipes.math_rl.train", {
        "env": "arithmetic", "model_name": base_model, "renderer_name": "role_colon",
        "loss_fn": "importance_sampling", "base_url": tinker_url, "groups_per_batch": 4, "group_size": 4,
        "max_steps": 2, "max_tokens": 4, "lora_rank": 8, "eval_every": 0,
    }, tinker_key, tmp_path / "math_rl", timeout=300)
    steps = sorted({r["step"] for r in rows if "env/all/reward/total" in r})
    assert steps == [0, 1], rows
    trainer = _new_trainer(tinker_url, tinker_key, before)
    assert trainer["step"] == 2 and trainer["tokens"] > 0
