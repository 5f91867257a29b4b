"""Smoke tests: each Keel-side benchmark runs on a tiny budget and prints the JSON it promises.

Benchmarks print figures; nothing here checks a speed. Not run here: `bench.compare_trl`'s runs (it
installs TRL into its own virtual environment; its inputs, command lines and the TRL runner's
settings are checked without TRL); docs/benchmarks.md has its commands. `bench.api` runs on a
scratch PostgreSQL database of its own, with a handful of requests per phase.
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
         "--prompt-length", "32", "--threads", "1", "--peak-gflops", "100", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=110, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "KEEL_BENCH_OUT": str(bench_out)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = last_json(proc.stdout)
    assert out["bench"] == "ppo" and out["timed_steps"] == 1
    assert out["tokens_per_s"] > 0 and out["generated_tokens"] > 0
    for phase in ("gen", "step", "update_actor", "update_critic", "reward"):
        assert phase in out["phases_s"], phase
    sizes = out["params_matmul"]  # PPO: every role counts
    assert sizes["critic"] > 0 and sizes["reward"] > 0 and sizes["policy"] > sizes["critic"]
    assert out["gemm_peak_gflops"] == 100 and 0 < out["mfu"] < 1 and out["mfu_cpu_time"] > 0
    assert "mfu_prompt_once" not in out  # one sample per prompt


def test_iteration_flops():
    """2N per token for each forward, 6N per epoch of an update, over prompt + response tokens."""
    from bench.ppo import iteration_flops

    m = {"prompt_length/mean": 6.0, "response_length/mean": 4.0}  # 10 tokens per sample, 3 samples
    grpo = iteration_flops(m, 3, policy=100, critic=None, reward=None, epochs=1)
    assert grpo == (2 * 2 + 6) * 100 * 30  # generation, reference, update
    assert iteration_flops({**m, "timing_s/old_log_prob": 0.1}, 3, policy=100, critic=None, reward=None,
                           epochs=2) == (2 * 3 + 12) * 100 * 30
    assert iteration_flops(m, 3, policy=100, critic=50, reward=20, epochs=1) == grpo + 8 * 50 * 30 + 2 * 20 * 30
    # One distinct prompt for the 3 samples: 6 prompt tokens once + 3 x 4 response tokens.
    assert iteration_flops(m, 3, policy=100, critic=None, reward=None, epochs=1, prompts=1) == 10 * 100 * 18


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


def test_gsm8k_prompts(tmp_path):
    from bench import datasets
    from engine.rewards.rules import gsm8k

    paths = datasets.build_gsm8k_prompts(tmp_path, rows=40, val_rows=8)
    import pyarrow.parquet as pq

    rows = pq.read_table(paths["train"]).to_pylist()
    assert len(rows) == 40 and len(pq.read_table(paths["val"])) == 8
    assert {r["data_source"] for r in rows} == {"openai/gsm8k"}
    for r in rows:  # a non-negative integer answer the `gsm8k` rule accepts in its `#### N` form
        assert r["ground_truth"].isdigit() and r["prompt"].endswith("?")
        assert gsm8k(f"So the answer is\n#### {r['ground_truth']}", r["ground_truth"]) == 1.0


def test_dpo(capsys, bench_out, one_thread):
    from bench import dpo

    out = dpo.main(["--steps", "3", "--batch-size", "4", "--max-length", "64", "--threads", "1",
                    "--peak-gflops", "100", "--json"])
    assert last_json(capsys.readouterr().out) == out
    assert out["bench"] == "dpo" and out["threads"] == 1 and out["timed_steps"] == 2
    assert out["pairs_per_s"] > 0 and out["pairs_per_cpu_s"] > 0 and out["padding_efficiency"] == 1.0  # packed
    assert out["reference_s"] > 0 and 0 < out["pairs_per_s_with_reference"] < out["pairs_per_s"]
    assert 0 < out["mfu"] < 1 and out["val_accuracy"] is not None


@pytest.mark.timeout(120)
def test_grpo(bench_out):
    """bench.ppo as GRPO: no critic, rule reward on the GSM8K-style prompts, n samples per prompt."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.ppo", "--adv-estimator", "grpo", "--reward-function", "gsm8k", "--gsm8k",
         "--n", "2", "--steps", "2", "--batch", "2", "--response-length", "8", "--prompt-length", "128",
         "--threads", "1", "--peak-gflops", "100", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=110, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "KEEL_BENCH_OUT": str(bench_out)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = last_json(proc.stdout)
    assert out["bench"] == "grpo" and out["n"] == 2 and out["reward"] == "gsm8k" and out["threads"] == 1
    assert out["timed_steps"] == 1 and out["tokens_per_s"] > 0 and out["tokens_per_cpu_s"] > 0
    assert out["generated_tokens"] == round(out["response_length_mean"] * 4)  # 2 prompts x 2 samples
    phases = out["phases_s"]
    assert "update_actor" in phases and "update_critic" not in phases and "values" not in phases
    assert "old_log_prob" not in phases  # one epoch in one mini-batch: on-policy, no recompute
    assert out["params_matmul"]["critic"] is None and out["params_matmul"]["reward"] is None  # rule reward
    assert 0 < out["mfu_prompt_once"] < out["mfu"] < 1  # 2 samples per prompt: the prompt runs once


def _trl_runner():
    """bench/trl_runner.py as a module (it is a script run in TRL's venv; these parts need no TRL)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("trl_runner", ROOT / "bench" / "trl_runner.py")
    module = importlib.util.module_from_spec(spec)
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path  # it drops its own folder from sys.path when run as a script
    return module


def test_trl_runner_grpo_and_dpo_settings_match_keel(tmp_path):
    from bench.ppo import GRPO_KL_COEF
    from engine.rewards.rules import gsm8k

    runner = _trl_runner()
    args = runner.parse_args(["grpo", "--model", "m", "--prompts", "p", "--batch", "16", "--n", "4",
                              "--response-length", "32", "--steps", "5", "--threads", "1"])
    kw = runner.grpo_config_kwargs(args, str(tmp_path))
    assert kw["per_device_train_batch_size"] == 64 and kw["num_generations"] == 4  # 16 prompts x 4
    assert kw["max_completion_length"] == 32 and kw["num_iterations"] == 1 and kw["max_steps"] == 5
    assert kw["beta"] == GRPO_KL_COEF and kw["top_k"] == 0 and kw["temperature"] == 1.0
    texts = ["#### 42", "x\n#### 1,234", "#### 7 and then #### 8", "no answer", "#### -3", "#### 42" + "." * 400]
    truths = ["42", "1234", "8", "1", "-3", "42"]
    assert runner.gsm8k_reward([[{"role": "assistant", "content": t}] for t in texts], truths) == \
        [gsm8k(t, g) for t, g in zip(texts, truths)]
    assert runner.grpo_dataset([{"prompt": "What?", "ground_truth": "1"}]) == [
        {"prompt": [{"role": "user", "content": "What?"}], "ground_truth": "1"}]
    args = runner.parse_args(["dpo", "--model", "m", "--data", "d", "--batch-size", "16", "--steps", "40"])
    kw = runner.dpo_config_kwargs(args, str(tmp_path))
    assert kw["beta"] == 0.1 and kw["per_device_train_batch_size"] == 16 and kw["loss_type"] == ["sigmoid"]
    assert kw["learning_rate"] == 1e-5 and kw["precompute_ref_log_probs"] is False
    assert runner.dpo_rows([{"prompt_ids": [1], "chosen_ids": [2, 3], "rejected_ids": [4], "x": 0}]) == [
        {"prompt_ids": [1], "chosen_ids": [2, 3], "rejected_ids": [4]}]


def test_compare_trl_inputs_and_commands(bench_out, monkeypatch):
    """The TRL side's inputs are Keel's token ids; `default` threads pass no --threads to either side."""
    import argparse

    import pyarrow.parquet as pq

    from bench import compare_trl, datasets
    from bench.common import demo_assets
    from engine.data import load_rows, tokenize_preference, tokenize_prompts
    from engine.models import load_tokenizer

    assets = demo_assets()
    small = datasets.build_longtail(bench_out / "data", assets["tokenizer"], rows=8, val_rows=4, max_response=40)
    monkeypatch.setattr(datasets, "longtail_paths", lambda **_: small)
    inputs = compare_trl.prepare_inputs(assets)
    tokenizer = load_tokenizer(assets["model"])
    pairs = tokenize_preference(load_rows(assets["preference_train"], "preference"), tokenizer, 256, "right")
    dpo = pq.read_table(inputs["dpo"]["tokens"]).to_pylist()
    assert [r["prompt_ids"] + r["chosen_ids"] for r in dpo] == [p.chosen_ids for p in pairs]
    assert [r["prompt_ids"] + r["rejected_ids"] for r in dpo] == [p.rejected_ids for p in pairs]
    grpo = pq.read_table(inputs["grpo"]["tokens"]).to_pylist()
    keel = tokenize_prompts(load_rows(inputs["grpo"]["data"], "prompts"), tokenizer, 128, "error")
    assert [r["prompt_ids"] for r in grpo] == [p.prompt_ids for p in keel]
    args = argparse.Namespace(dtype="float32", gradient_checkpointing=False, ppo_steps=5, grpo_steps=5, rm_steps=40,
                              longtail_steps=20, dpo_steps=40, dpo_longtail_steps=20)
    for workload in ("grpo", "dpo", "dpo_longtail", "ppo", "rm"):
        for threads in ("1", "default"):
            cmds = compare_trl.commands(workload, inputs[workload], assets["model"], args, threads)
            for side in ("keel", "trl"):
                assert ("--threads" in cmds[side]) == (threads == "1"), (workload, side)
    grpo_cmd = compare_trl.commands("grpo", inputs["grpo"], assets["model"], args, "1")
    for flag in ("--batch", "--n", "--response-length", "--steps"):  # the same shape on both sides
        assert grpo_cmd["keel"][grpo_cmd["keel"].index(flag) + 1] == grpo_cmd["trl"][grpo_cmd["trl"].index(flag) + 1]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_api_against_the_bare_endpoint(bench_out):
    """Keel's jobs API and the bare FastAPI + SQLAlchemy app (`bench.bare_app`) in one invocation:
    both answer, every phase has its CPU per request, and the ratios come out (in a subprocess: it
    starts and stops its own servers)."""
    from databases import PG_ADMIN_URL

    proc = subprocess.run(
        [sys.executable, "-m", "bench.api", "--rounds", "2", "--concurrency", "4", "--requests", "24",
         "--duration", "20", "--subscribers", "3", "--events", "2", "--event-interval", "0.05", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=230, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "KEEL_BENCH_OUT": str(bench_out),
             "KEEL_BENCH_PG_ADMIN_URL": PG_ADMIN_URL})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = last_json(proc.stdout)
    assert out["bench"] == "api" and len(out["rounds"]) == 2
    for r in out["rounds"]:
        for phase in ("keel_post", "bare_insert", "keel_get", "bare_select"):
            assert r[phase]["errors"] == 0 and r[phase]["requests"] == 24, (phase, r[phase])
            assert r[phase]["server_cpu_ms_per_req"] > 0 and r[phase]["p99_ms"] >= r[phase]["p50_ms"] > 0
        assert r["post_cpu_ratio"] > 0 and r["get_cpu_ratio"] > 0
    assert out["post_cpu_ratio"]["n"] == 2 and out["get_cpu_ratio"]["n"] == 2
    assert out["sse"]["delivered"] == out["sse"]["expected"] == 6
    assert set(out["targets_met"]) >= {"post_cpu_ratio", "get_cpu_ratio", "post_p99_ms", "get_p99_ms", "zero_errors"}


def test_dispatch_pass_cost(bench_out):
    """A sweeper's dispatch pass over queued jobs on a full cluster (a scratch database of its own, in a
    subprocess: it sets the process's database)."""
    from databases import PG_ADMIN_URL

    proc = subprocess.run([sys.executable, "-m", "bench.dispatch", "--jobs", "30", "--passes", "3", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "KEEL_BENCH_PG_ADMIN_URL": PG_ADMIN_URL})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = last_json(proc.stdout)
    assert out["bench"] == "dispatch" and out["jobs"] == 30
    assert out["cpu_ms_per_pass"]["n"] == out["wall_ms_per_pass"]["n"] == 3
    assert out["cpu_ms_per_pass"]["median"] > 0 and out["wall_ms_per_pass"]["median"] > 0


def test_tinker_lora(bench_out):
    """Two LoRA clients in one shared host against two separate trainers, and two interleaving (on the
    demo model: the figures mean nothing at this size, the shape of the output does)."""
    from bench.common import demo_assets

    model = demo_assets(bench_out / "demo")["model"]
    proc = subprocess.run([sys.executable, "-m", "bench.tinker_lora", "--model", model, "--clients", "2",
                           "--interleaved", "2", "--rounds", "1", "--repeats", "1", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = last_json(proc.stdout)
    assert out["clients"] == 2 and out["shared"] is True
    assert out["host_tensors_mib"] < 2 * out["base_mib"]
    for key in ("host_peak_over_budget", "separate_peak_over_budget", "interleaved_over_one"):
        assert out[key]["min"] > 0, out
    assert {"median", "min", "max"} <= set(out["host_resident_over_budget"])  # a few MiB: may be below 0
