"""Memory plan accuracy: `core.memory_plan`'s estimate against the measured peak RSS growth of real
training runs on CPU.

    python -m bench.memory_plan [--cases sft-demo,ppo-wide,...] [--steps 2] [--threads 1] --json

Each case runs the real method (`engine.runtime.jobs.run_local`, the in-process executor: SFT, the
Bradley-Terry reward model, PPO with its four roles in one process) for a few steps in a fresh
subprocess, on the demo model or the wide model (`bench.datasets.WIDE_SHAPE`). The data is
synthetic and long enough that every sequence is cut to the configured maximum, so the
estimate's worst case (every row at full length) is what runs; PPO samples from a random policy,
which rarely emits EOS early.

Measured growth: the subprocess imports torch, transformers and the engine, runs one tiny backward
(thread pools and autograd set up), then takes its resident set size (`VmRSS`) as the baseline and
resets the kernel's high-water mark (`/proc/self/clear_refs`, 5); after the run, growth = `VmHWM` -
baseline. So the model's weights, everything training allocates and the allocator's retained
memory count, the interpreter and the libraries do not; the estimate compared is the plan's
per-worker `total_bytes` + `host_bytes` (on a CPU worker the rollback snapshots share the memory),
without `runtime_bytes`. Linux only (the high-water reset).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import demo_assets, emit

_TEXT = " ".join(["Start small and build the habit one day at a time, then check your progress."] * 30)

CASES: dict[str, dict] = {
    "sft-demo": {"method": "sft", "model": "demo", "hp": {
        "data": {"train_batch_size": 16, "max_prompt_length": 128, "max_response_length": 128, "truncation": "right"},
        "max_token_len_per_gpu": 2048}},
    "sft-demo-ckpt": {"method": "sft", "model": "demo", "hp": {
        "data": {"train_batch_size": 16, "max_prompt_length": 128, "max_response_length": 128, "truncation": "right"},
        "max_token_len_per_gpu": 2048, "model": {"enable_gradient_checkpointing": True}}},
    "reward_model-demo": {"method": "reward_model", "model": "demo", "hp": {
        "data": {"train_batch_size": 8, "max_length": 256, "truncation": "right"}, "max_token_len_per_gpu": 2048}},
    "ppo-demo": {"method": "ppo", "model": "demo", "hp": {
        "data": {"train_batch_size": 8, "max_prompt_length": 64, "max_response_length": 64, "truncation": "left"},
        "rollout": {"n": 2}, "actor": {"ppo_mini_batch_size": 8, "ppo_epochs": 1, "ppo_max_token_len_per_gpu": 1024},
        "critic": {"ppo_max_token_len_per_gpu": 1024}}},
    "sft-wide": {"method": "sft", "model": "wide", "hp": {
        "data": {"train_batch_size": 8, "max_prompt_length": 128, "max_response_length": 128, "truncation": "right"},
        "max_token_len_per_gpu": 1024}},
    "sft-wide-bf16": {"method": "sft", "model": "wide", "hp": {
        "data": {"train_batch_size": 8, "max_prompt_length": 128, "max_response_length": 128, "truncation": "right"},
        "max_token_len_per_gpu": 1024, "model": {"dtype": "bfloat16"}}},
    "reward_model-wide": {"method": "reward_model", "model": "wide", "hp": {
        "data": {"train_batch_size": 8, "max_length": 256, "truncation": "right"}, "max_token_len_per_gpu": 1024}},
    "ppo-wide": {"method": "ppo", "model": "wide", "hp": {
        "data": {"train_batch_size": 4, "max_prompt_length": 64, "max_response_length": 64, "truncation": "left"},
        "rollout": {"n": 2}, "actor": {"ppo_mini_batch_size": 4, "ppo_epochs": 1, "ppo_max_token_len_per_gpu": 512},
        "critic": {"ppo_max_token_len_per_gpu": 512}}},
}
"""Sizes chosen so activations, not fixed costs, are a fair share of the total on both models."""


def model_dir(name: str) -> str:
    if name == "wide":
        from bench.datasets import wide_model_path

        return wide_model_path()
    return demo_assets()["model"]


def _rows(method: str, n: int) -> list[dict]:
    if method == "sft":
        return [{"prompt": _TEXT, "response": _TEXT} for _ in range(n)]
    if method == "reward_model":
        return [{"prompt": "Any tips?", "chosen": _TEXT, "rejected": _TEXT} for _ in range(n)]
    return [{"prompt": _TEXT, "ground_truth": "1", "data_source": "gsm8k"} for _ in range(n)]


def job_spec(case: str, steps: int) -> tuple[str, dict]:
    """(method, hyperparameters with every default filled in, as the API stores them)."""
    from engine.config import METHOD_CONFIGS, build_config, config_to_dict

    spec = CASES[case]
    hp = json.loads(json.dumps(spec["hp"]))
    hp.setdefault("trainer", {}).update({"total_training_steps": steps, "save_freq": -1, "test_freq": -1})
    return spec["method"], config_to_dict(build_config(METHOD_CONFIGS[spec["method"]], hp))


def estimate(case: str, steps: int) -> dict:
    from core.memory_plan import Capacity, plan_job
    from core.model_shape import Architecture

    method, hp = job_spec(case, steps)
    directory = model_dir(CASES[case]["model"])
    models = {"policy": Architecture.from_dir(directory)}
    if method == "ppo":
        models["reward"] = models["policy"]  # the bench scores with the same model, a fresh head
    return plan_job(method, hp, {"num_workers": 1}, models, Capacity())


# --- the measuring subprocess -----------------------------------------------------------------------

def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(key + r":\s+(\d+)", f.read()).group(1)) * 1024


def measure(case: str, steps: int, threads: int) -> dict:
    """Run `case` in this process; returns the peak RSS growth (see the module docstring)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    torch.set_num_threads(threads)
    from transformers import LlamaForCausalLM, LlamaForSequenceClassification  # noqa: F401

    from engine.config import METHOD_CONFIGS, JobRequest, Resources, build_config
    from engine.runtime.jobs import run_local
    from engine.runtime.reporting import RecordingReporter

    method, hp = job_spec(case, steps)
    directory = model_dir(CASES[case]["model"])
    work = Path(tempfile.mkdtemp(prefix="keel-bench-memory-"))
    rows = _rows(method, 32)
    data = work / "train.parquet"
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), data)
    request = JobRequest(job_id=f"bench-{case}", method=method, config=build_config(METHOD_CONFIGS[method], hp),
                         model_path=directory, training_file=str(data), validation_file=None,
                         output_dir=str(work / "out"), checkpoint_dir=str(work / "ckpt"),
                         reward={"model_path": directory} if method == "ppo" else {},
                         resources=Resources(num_workers=1, cpus_per_worker=float(threads), executor="local"))
    # engine.runtime.distributed.node_identity imports Ray (when installed) even in the local executor: an
    # import, not training memory, so it happens before the baseline too.
    with contextlib.suppress(ImportError):
        import ray  # noqa: F401
    # The data path's own memory (arrow's pool, the tokenizer) is not the model's: warm it up first.
    from engine.data import load_rows
    from engine.models import load_tokenizer

    kind = {"sft": "sft", "reward_model": "preference", "ppo": "prompts"}[method]
    tokenizer = load_tokenizer(directory)
    for row in load_rows(str(data), kind):
        tokenizer(row["prompt"])
    del tokenizer
    warm = torch.randn(32, 32, requires_grad=True)
    (warm @ warm).sum().backward()
    del warm
    gc.collect()
    baseline = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    run_local(request, RecordingReporter())
    peak = _status("VmHWM")
    return {"case": case, "baseline_bytes": baseline, "measured_bytes": peak - baseline}


def run_case(case: str, steps: int, threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, "-m", "bench.memory_plan", "--child", case, "--steps", str(steps),
                          "--threads", str(threads)], capture_output=True, text=True, env=env, check=False,
                         cwd=Path(__file__).resolve().parent.parent)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"case {case} failed:\n{out.stderr[-4000:]}")
    measured = json.loads(lines[-1])
    plan = estimate(case, steps)
    pw = plan["per_worker"]
    estimated = pw["total_bytes"] + pw["host_bytes"]
    return {"case": case, "estimate_mib": round(estimated / 2**20, 1),
            "measured_mib": round(measured["measured_bytes"] / 2**20, 1),
            "ratio": round(estimated / measured["measured_bytes"], 3),
            "weights_mib": round(pw["weights_bytes"] / 2**20, 1),
            "gradients_mib": round(pw["gradients_bytes"] / 2**20, 1),
            "optimizer_mib": round(pw["optimizer_bytes"] / 2**20, 1),
            "activations_mib": round(pw["activations_bytes"] / 2**20, 1),
            "host_mib": round(pw["host_bytes"] / 2**20, 1)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    p.add_argument("--steps", type=int, default=2, help="training steps per case (PPO: iterations)")
    p.add_argument("--threads", type=int, default=1, help="torch threads in each run")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.steps, args.threads)), flush=True)
        return {}
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown cases {unknown}; choose from {list(CASES)}")
    results = [run_case(c, args.steps, args.threads) for c in cases]
    worst = max(abs(r["ratio"] - 1) for r in results)
    result = {"bench": "memory_plan", "steps": args.steps, "threads": args.threads, "cases": results,
              "worst_relative_error": round(worst, 3)}
    if args.json:
        emit(result, True)
    else:
        print(f"{'case':<20} {'estimate MiB':>13} {'measured MiB':>13} {'ratio':>6}")
        for r in results:
            print(f"{r['case']:<20} {r['estimate_mib']:>13} {r['measured_mib']:>13} {r['ratio']:>6}")
        print(f"worst relative error: {worst:.3f}")
    return result


if __name__ == "__main__":
    main()
