"""Smoke tests: each Keel-side benchmark runs on a tiny budget and prints the JSON it promises.

Benchmarks print figures; nothing here checks a speed. Not run here: `bench.compare_trl` (it
installs TRL into its own virtual environment) and `bench.api` (it starts the service on a scratch
PostgreSQL database); docs/benchmarks.md has their commands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_out(tmp_path_factory):
    """Generated assets go to a temporary KEEL_BENCH_OUT, not the checkout's bench/out."""
    out = tmp_path_factory.mktemp("bench-out")
    before = os.environ.get("KEEL_BENCH_OUT")
    os.environ["KEEL_BENCH_OUT"] = str(out)
    yield out
    if before is None:
        os.environ.pop("KEEL_BENCH_OUT", None)
    else:
        os.environ["KEEL_BENCH_OUT"] = before


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def last_json(text: str) -> dict:
    lines = [line for line in text.splitlines() if line.startswith("{")]
    assert lines, text[-2000:]
    return json.loads(lines[-1])


def test_gemm(capsys, one_thread):
    from bench import gemm

    gemm.main(["--size", "128", "--repeats", "2", "--threads", "1", "--json"])
    out = last_json(capsys.readouterr().out)
    assert out["bench"] == "gemm" and out["threads"] == 1
    for key in ("fp32_gflops", "bf16_gflops", "fp32_gflops_median", "bf16_gflops_median"):
        assert out[key] > 0, key


def test_datasets_longtail(capsys, bench_out, tmp_path):
    from bench import datasets

    datasets.main(["--out", str(tmp_path), "--rows", "12", "--val-rows", "4", "--min-response", "10",
                   "--max-response", "60", "--json"])
    out = last_json(capsys.readouterr().out)
    assert Path(out["train"]).is_file() and Path(out["val"]).is_file()
    lengths = out["response_tokens"]
    assert 10 <= lengths["min"] <= lengths["max"] <= 62  # + EOS, cut at a token boundary


def test_reward_model(capsys, bench_out, one_thread):
    from bench import reward_model

    reward_model.main(["--steps", "3", "--batch-size", "4", "--max-length", "64", "--threads", "1",
                       "--peak-gflops", "100", "--json"])
    out = last_json(capsys.readouterr().out)
    for key in ("pairs_per_s", "tokens_per_s", "mfu", "padding_efficiency", "final_loss", "val_accuracy",
                "pairs_per_cpu_s", "timed_steps", "timing"):
        assert key in out, key
    assert out["timed_steps"] == 2  # steps 2..3: the first step is not timed
    assert out["pairs_per_s"] > 0 and 0 < out["padding_efficiency"] <= 1 and 0 < out["mfu"] < 1


def test_reward_model_packing_compare(capsys, bench_out, one_thread):
    from bench import reward_model

    reward_model.main(["--packing-compare", "--rounds", "1", "--steps", "3", "--batch-size", "4",
                       "--max-length", "64", "--threads", "1", "--json"])
    out = last_json(capsys.readouterr().out)
    assert out["bench"] == "reward_model_packing" and out["rounds"] == 1
    assert out["padding_efficiency"]["packed"]["median"] == 1.0
    assert out["padding_efficiency"]["padded"]["median"] < 1.0
    assert out["tokens_per_s_ratio"]["n"] == 1 and out["tokens_per_s_ratio"]["median"] > 0
    # Same data, same seed: the packed and the padded run learn the same thing.
    assert out["final_loss"]["packed"]["median"] == pytest.approx(out["final_loss"]["padded"]["median"], abs=1e-3)


@pytest.mark.timeout(120)
def test_ppo(bench_out):
    """In a subprocess: it starts (and stops) its own local Ray."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.ppo", "--steps", "2", "--batch", "4", "--response-length", "8",
         "--prompt-length", "32", "--threads", "1", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=110, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "KEEL_BENCH_OUT": str(bench_out)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = last_json(proc.stdout)
    assert out["bench"] == "ppo" and out["timed_steps"] == 1
    assert out["tokens_per_s"] > 0 and out["generated_tokens"] > 0
    for phase in ("gen", "step", "update_actor", "update_critic", "reward"):
        assert phase in out["phases_s"], phase


def test_ppo_step_cost(capsys, bench_out, one_thread):
    """In process (no Ray): the snapshot's share of an update step, phase by phase."""
    from bench import ppo

    out = ppo.main(["--step-cost", "--repeat", "2", "--batch", "4", "--response-length", "8",
                    "--prompt-length", "32", "--threads", "1", "--json"])
    assert last_json(capsys.readouterr().out) == out
    assert out["bench"] == "ppo.step_cost" and out["step_ms"]["n"] == 2
    for phase in ("snapshot", "gen", "old_log_prob", "values", "update_critic", "update_actor"):
        assert 0 < out[f"{phase}_ms"]["median"] < out["step_ms"]["max"], phase
    assert 0 < out["snapshot_share"] < 1
