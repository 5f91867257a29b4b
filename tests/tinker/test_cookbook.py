"""tinker-cookbook recipes against a live Keel, as a user runs them: `python -m` with command-line
arguments only (a local model directory, local data, `base_url`), the key in `TINKER_API_KEY`. Each
recipe must finish its steps (its own metrics log says so) and leave a Keel trainer behind it that
took those optimizer steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cookbook_runs import finish, start, trainer

QUESTIONS = [(f"What is {a} + {b}?", str(a + b)) for a in range(3, 9) for b in range(2, 6)]
TIMEOUT_S = 420.0


def _chat_file(root: Path) -> Path:
    """Conversations in the cookbook's layout (`{"messages": [...]}` per line)."""
    path = root / "chat.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q},
                                                     {"role": "assistant", "content": a}]}) + "\n"
                            for q, a in QUESTIONS))
    return path


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
    procs = {name: start(["-m", module], args, tinker_key, root / name) for name, (module, args) in runs.items()}
    return finish(procs, root, TIMEOUT_S)


def test_chat_sl_recipe(recipes, tinker_url, tinker_key):
    run = recipes["chat_sl"]
    assert run["code"] == 0, run["output"]
    losses = {r["step"]: r["train_mean_nll"] for r in run["rows"] if "train_mean_nll" in r}
    assert sorted(losses) == [0, 1, 2], run["rows"]
    assert all(v > 0 for v in losses.values())
    made = trainer(tinker_url, tinker_key, run["model_id"])
    assert made["step"] == 3 and made["tokens"] > 0  # Keel's own record of the three optimizer steps


def test_math_rl_recipe(recipes, tinker_url, tinker_key):
    run = recipes["math_rl"]
    assert run["code"] == 0, run["output"]
    steps = sorted({r["step"] for r in run["rows"] if "env/all/reward/total" in r})
    assert steps == [0, 1], run["rows"]
    made = trainer(tinker_url, tinker_key, run["model_id"])
    assert made["step"] == 2 and made["tokens"] > 0
