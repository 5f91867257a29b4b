"""Keel against Hugging Face TRL on the same workloads, alternating, in one run.

    python -m bench.compare_trl [--workloads rm,rm_longtail,ppo,grpo,dpo,dpo_longtail] [--rounds 3]
        [--threads 1,default] [--rm-steps 40] [--longtail-steps 20] [--ppo-steps 5] [--grpo-steps 5]
        [--dpo-steps 40] [--dtype float32|bfloat16] [--gradient-checkpointing] [--wide] [--setup-only] --json

TRL runs in its own virtual environment, `.bench-venv` at the repository root, made here on first
use (`python -m venv`, then `pip install torch==2.13.0` first so pip never pulls a CUDA build, then
`trl==TRL_VERSION` with `transformers` pinned to Keel's version so both sides run the same model
code, and `requests`, which GRPOTrainer's module imports). TRL_VERSION is the last release that still ships `PPOTrainer`/`PPOConfig` (1.12.0, under
`trl.experimental.ppo`; 1.13.0 dropped them); its `RewardTrainer`, `GRPOTrainer` and `DPOTrainer`
serve the other workloads, so one environment runs them all.

Workloads (both sides get the same token ids: Keel's tokenizer code writes the TRL inputs):
- `rm`: Bradley-Terry on the demo pairs, batch 16, max length 256 -> pairs/s;
- `rm_longtail`: the same on `bench.datasets`' long-tail pairs (responses 10..400 tokens), max
  length 512 -> pairs/s;
- `ppo`: batch 16, 32 new tokens, 1 PPO epoch, policy + reference + value + reward models -> generated
  tokens/s;
- `grpo`: 16 GSM8K-style prompts (`bench.datasets`) x 4 samples, 32 new tokens, no critic, the
  `gsm8k` rule reward (written again in the TRL runner), KL to the reference as a loss term (0.04),
  1 epoch in one mini-batch -> generated tokens/s;
- `dpo`: DPO (sigmoid, beta 0.1) on the demo pairs, batch 16, max length 256 -> pairs/s;
- `dpo_longtail`: the same on the long-tail pairs, max length 512 -> pairs/s. Keel computes the
  reference log-probs once before training (cached; `bench.dpo` reports that pass as
  `reference_s`), TRL by default inside every step; the ratio is over the training steps.

`--wide` runs both sides on `bench.datasets`' wide Llama (hidden 768, 4 layers, 28M parameters in
matmuls) instead of the demo one (hidden 128, 0.3M: per-op overhead-bound): the same code where
matrix products dominate.

Threads (`--threads`, a comma list): `1` gives both sides one torch thread (Keel: a job with
`resources.cpus_per_worker: 1`); `default` passes nothing, so each side runs at its own default:
Keel's from the job's default resources, `cpus_per_worker: auto` resolved as the service resolves it
at job creation for a cluster of one idle node with this machine's usable cores
(`bench.common.job_resources`: every core, up to `KEEL_AUTO_CPUS_PER_WORKER_MAX`, 16; then
`engine.runtime.distributed.worker_threads`), TRL's torch's default (one per core).

Each round runs every workload on both sides, Keel first in even rounds and TRL first in odd ones,
each in a fresh subprocess at the same dtype and gradient-checkpointing setting. The ratio Keel/TRL
is taken per round (neighbouring runs share the machine's load) and summarised by median and spread
over the rounds. The ratio of the figure per CPU-second (pairs or generated tokens per CPU second of
the measuring processes; Keel's PPO/GRPO count the local Ray's processes too) is reported as well:
it is far less sensitive to other processes on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, demo_assets, emit, load_average, out_dir, spread

TRL_VERSION = "1.12.0"
TORCH_VERSION = "2.13.0"
VENV = ROOT / ".bench-venv"
RUNNER = ROOT / "bench" / "trl_runner.py"
TARGETS = {"rm": 1.2, "rm_longtail": 2.0, "ppo": 3.0, "grpo": 2.0, "dpo": 1.3, "dpo_longtail": 2.0}
"""Keel/TRL throughput the issue asks for."""


def venv_python() -> Path:
    return VENV / "bin" / "python"


def _installed(package: str) -> str | None:
    probe = f"import importlib.metadata as m; print(m.version({package!r}))"
    try:
        out = subprocess.run([str(venv_python()), "-c", probe], capture_output=True, text=True, timeout=120,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def ensure_venv(log=sys.stderr) -> dict[str, str]:
    """Create `.bench-venv` with torch, TRL and Keel's transformers version, unless it is there."""
    import transformers

    want = {"trl": TRL_VERSION, "torch": TORCH_VERSION, "transformers": transformers.__version__}
    have = {name: _installed(name) for name in want}
    if all(have[n] and have[n].split("+")[0] == v for n, v in want.items()) and _installed("requests"):
        return have
    if not venv_python().exists():
        print(f"creating {VENV}", file=log, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(venv_python()), "-m", "pip", "install", "--quiet"]
    print(f"installing torch=={TORCH_VERSION}, then trl=={TRL_VERSION} into {VENV}", file=log, flush=True)
    subprocess.run([*pip, f"torch=={TORCH_VERSION}"], check=True)
    # `requests`: TRL's GRPOTrainer imports its vLLM client module, which needs it, even without vLLM.
    subprocess.run([*pip, f"torch=={TORCH_VERSION}", f"trl=={TRL_VERSION}",
                    f"transformers=={want['transformers']}", "requests"], check=True)
    return {name: _installed(name) or "?" for name in want}


def _write_ids(path: Path, columns: dict[str, list]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({k: pa.array(v, pa.list_(pa.int32())) for k, v in columns.items()}), path)
    return str(path)


PROMPT_LENGTH = 64
"""PPO's prompt cap (the demo prompts are shorter)."""
GRPO_PROMPT_LENGTH = 128
"""GRPO's prompt cap: every GSM8K-style prompt fits (50..75 tokens with the demo tokenizer), none is cut."""


def prepare_inputs(assets: dict[str, str]) -> dict[str, dict[str, str]]:
    """Per workload, the files each side reads: Keel the raw rows, TRL the token ids Keel makes of them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.datasets import gsm8k_paths, longtail_paths
    from engine.data import load_rows, tokenize_preference, tokenize_prompts
    from engine.models import load_tokenizer

    tokenizer = load_tokenizer(assets["model"])
    out = out_dir() / "trl"
    longtail = longtail_paths(tokenizer_dir=assets["tokenizer"])
    inputs: dict[str, dict[str, str]] = {}
    for name, data, val, max_length in (("rm", assets["preference_train"], assets["preference_val"], 256),
                                        ("rm_longtail", longtail["train"], longtail["val"], 512)):
        pairs = tokenize_preference(load_rows(data, "preference"), tokenizer, max_length, "right")
        tokens = _write_ids(out / f"{name}.parquet", {"chosen_ids": [p.chosen_ids for p in pairs],
                                                      "rejected_ids": [p.rejected_ids for p in pairs]})
        # DPO: the prompt and each completion apart (TRL's processed DPO columns).
        dpo = _write_ids(out / f"dpo_{name}.parquet", {
            "prompt_ids": [p.chosen_ids[:p.chosen_prompt_len] for p in pairs],
            "chosen_ids": [p.chosen_ids[p.chosen_prompt_len:] for p in pairs],
            "rejected_ids": [p.rejected_ids[p.rejected_prompt_len:] for p in pairs]})
        inputs[name] = {"data": data, "val": val, "max_length": str(max_length), "tokens": tokens}
        inputs[name.replace("rm", "dpo")] = {"data": data, "val": val, "max_length": str(max_length), "tokens": dpo}
    prompts = tokenize_prompts(load_rows(assets["prompts_train"], "prompts"), tokenizer, PROMPT_LENGTH, "left")
    inputs["ppo"] = {"data": assets["prompts_train"],
                     "tokens": _write_ids(out / "ppo_prompts.parquet", {"prompt_ids": [p.prompt_ids for p in prompts]})}
    gsm8k = gsm8k_paths()["train"]
    rows = load_rows(gsm8k, "prompts")
    ids = [p.prompt_ids for p in tokenize_prompts(rows, tokenizer, GRPO_PROMPT_LENGTH, "error")]
    path = out / "grpo_prompts.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"prompt": pa.array([r["prompt"] for r in rows], pa.string()),
                             "ground_truth": pa.array([r["ground_truth"] for r in rows], pa.string()),
                             "prompt_ids": pa.array(ids, pa.list_(pa.int32()))}), path)
    inputs["grpo"] = {"data": gsm8k, "tokens": str(path)}
    return inputs


def commands(workload: str, inputs: dict[str, str], model: str, args, threads: str) -> dict[str, list[str]]:
    """The Keel and TRL command lines of one workload at one thread setting (`1`, or `default`: none passed)."""
    common = ["--dtype", args.dtype, "--json"] + ([] if threads == "default" else ["--threads", threads])
    if args.gradient_checkpointing:
        common.append("--gradient-checkpointing")
    trl = [str(venv_python()), str(RUNNER)]
    if workload == "ppo":
        shape = ["--batch", "16", "--response-length", "32", "--steps", str(args.ppo_steps), "--epochs", "1"]
        return {"keel": [sys.executable, "-m", "bench.ppo", "--model", model, "--reward-model", model,
                         "--prompts", inputs["data"], "--prompt-length", str(PROMPT_LENGTH), *shape, *common],
                "trl": [*trl, "ppo", "--model", model, "--reward-model", model, "--prompts", inputs["tokens"],
                        *shape, *common]}
    if workload == "grpo":
        shape = ["--batch", "16", "--n", "4", "--response-length", "32", "--steps", str(args.grpo_steps)]
        return {"keel": [sys.executable, "-m", "bench.ppo", "--adv-estimator", "grpo", "--reward-function", "gsm8k",
                         "--model", model, "--prompts", inputs["data"], "--prompt-length", str(GRPO_PROMPT_LENGTH),
                         "--epochs", "1", *shape, *common],
                "trl": [*trl, "grpo", "--model", model, "--prompts", inputs["tokens"], *shape, *common]}
    if workload.startswith("dpo"):
        steps = args.dpo_steps if workload == "dpo" else args.dpo_longtail_steps
        shape = ["--batch-size", "16", "--steps", str(steps)]
        return {"keel": [sys.executable, "-m", "bench.dpo", "--model", model, "--data", inputs["data"],
                         "--val-data", inputs["val"], "--max-length", inputs["max_length"], "--no-mfu", *shape,
                         *common],
                "trl": [*trl, "dpo", "--model", model, "--data", inputs["tokens"], *shape, *common]}
    steps = args.rm_steps if workload == "rm" else args.longtail_steps
    shape = ["--batch-size", "16", "--steps", str(steps)]
    return {"keel": [sys.executable, "-m", "bench.reward_model", "--model", model, "--data", inputs["data"],
                     "--val-data", inputs["val"], "--max-length", inputs["max_length"], "--no-mfu", *shape,
                     *common],
            "trl": [*trl, "rm", "--model", model, "--data", inputs["tokens"], *shape, *common]}


def run_json(cmd: list[str], timeout: float) -> dict:
    """Run a benchmark subprocess; its last stdout line that parses as JSON."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"})
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    tail = (proc.stderr or proc.stdout)[-2000:]
    return {"error": f"exit {proc.returncode}", "stderr_tail": tail}


METRIC = {"rm": "pairs_per_s", "rm_longtail": "pairs_per_s", "ppo": "tokens_per_s", "grpo": "tokens_per_s",
          "dpo": "pairs_per_s", "dpo_longtail": "pairs_per_s"}
CPU_METRIC = {"pairs_per_s": "pairs_per_cpu_s", "tokens_per_s": "tokens_per_cpu_s"}


def summarise(workload: str, keel: list[dict], trl: list[dict]) -> dict:
    """Keel/TRL ratios of one workload at one thread setting, per round, as median/min/max."""
    metric = METRIC[workload]
    pairs = [(k, t) for k, t in zip(keel, trl) if metric in k and metric in t]
    entry: dict = {"metric": metric, "target_ratio": TARGETS[workload]}
    errors = [x for x in keel + trl if "error" in x]
    if errors:
        entry["errors"] = errors[:2]
    if not pairs:
        return entry
    ratios = [k[metric] / t[metric] for k, t in pairs]
    entry.update({"keel": spread([k[metric] for k, _ in pairs]), "trl": spread([t[metric] for _, t in pairs]),
                  "ratio": spread(ratios), "met": statistics.median(ratios) >= TARGETS[workload],
                  "threads": {"keel": pairs[0][0].get("threads"), "trl": pairs[0][1].get("threads")}})
    cpu = CPU_METRIC[metric]
    if all(k.get(cpu) and t.get(cpu) for k, t in pairs):
        cpu_ratios = [k[cpu] / t[cpu] for k, t in pairs]
        entry["ratio_cpu_time"] = spread(cpu_ratios)
        entry["met_cpu_time"] = statistics.median(cpu_ratios) >= TARGETS[workload]
    if metric == "pairs_per_s":
        entry["padding_efficiency"] = {"keel": pairs[0][0].get("padding_efficiency"),
                                       "trl": pairs[0][1].get("padding_efficiency")}
    if workload.startswith("dpo"):
        entry["reference_s_keel"] = pairs[-1][0].get("reference_s")
        entry["keel_pairs_per_s_with_reference"] = spread([k.get("pairs_per_s_with_reference") or 0 for k, _ in pairs])
    if workload in ("ppo", "grpo"):
        entry["phases_s_keel"] = pairs[-1][0].get("phases_s")
        entry["gen_s_trl"] = pairs[-1][1].get("timing_s/gen")
        entry["step_s_trl"] = pairs[-1][1].get("timing_s/step")
    if workload == "grpo":
        entry["prompt_ids_match"] = pairs[-1][1].get("prompt_ids_match")
    return entry


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="rm,rm_longtail,ppo,grpo,dpo,dpo_longtail")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,default",
                   help="thread settings, comma-separated: a count for both sides, or `default` (each its "
                        "own: Keel's job default `cpus_per_worker: auto`, resolved for this machine)")
    p.add_argument("--rm-steps", type=int, default=40)
    p.add_argument("--longtail-steps", type=int, default=20)
    p.add_argument("--ppo-steps", type=int, default=5)
    p.add_argument("--grpo-steps", type=int, default=5)
    p.add_argument("--dpo-steps", type=int, default=40)
    p.add_argument("--dpo-longtail-steps", type=int, default=20)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--wide", action="store_true",
                   help="both sides train bench.datasets' wide Llama (28M, matmul-bound) instead of the demo one")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per benchmark subprocess")
    p.add_argument("--setup-only", action="store_true", help="make the venv and inputs, run nothing")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in TARGETS:
            p.error(f"unknown workload {w!r}; choose from {sorted(TARGETS)}")
    settings = [t for t in args.threads.split(",") if t]
    for t in settings:
        if t != "default" and not (t.isdigit() and int(t) > 0):
            p.error(f"--threads: {t!r} is neither a positive count nor `default`")

    versions = ensure_venv()
    assets = demo_assets()
    inputs = prepare_inputs(assets)
    model = assets["model"]
    if args.wide:  # same tokenizer, same inputs
        from bench.datasets import wide_model_path

        model = wide_model_path(tokenizer_dir=assets["tokenizer"])
    if args.setup_only:
        emit({"bench": "compare_trl", "setup": "done", "venv": str(VENV), "versions": versions}, args.json)
        return {}
    runs = {(t, w): {"keel": [], "trl": []} for t in settings for w in workloads}
    load = []
    start = time.perf_counter()
    for r in range(args.rounds):
        for t in settings:
            for w in workloads:
                cmds = commands(w, inputs[w], model, args, t)
                for side in (("keel", "trl") if r % 2 == 0 else ("trl", "keel")):
                    load.append(load_average())
                    res = run_json(cmds[side], args.timeout)
                    runs[t, w][side].append(res)
                    print(f"round {r + 1} threads={t} {w} {side}: {res.get(METRIC[w], res.get('error'))}",
                          file=sys.stderr, flush=True)
    result: dict = {"bench": "compare_trl", "trl": TRL_VERSION, "versions": versions, "dtype": args.dtype,
                    "model": "wide" if args.wide else "demo",
                    "gradient_checkpointing": args.gradient_checkpointing, "rounds": args.rounds,
                    "load_avg_1m": spread(load), "wall_s": round(time.perf_counter() - start, 1),
                    "threads": {t: {w: summarise(w, **runs[t, w]) for w in workloads} for t in settings}}
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
