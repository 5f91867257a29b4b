"""Keel against Hugging Face TRL on the same workloads, alternating, in one run.

    python -m bench.compare_trl [--workloads rm,rm_longtail,ppo] [--rounds 3] [--rm-steps 40]
        [--longtail-steps 20] [--ppo-steps 5] [--dtype float32|bfloat16] [--gradient-checkpointing]
        [--threads N] [--setup-only] --json

TRL runs in its own virtual environment, `.bench-venv` at the repository root, made here on first
use (`python -m venv`, then `pip install torch==2.13.0` first so pip never pulls a CUDA build, then
`trl==TRL_VERSION` with `transformers` pinned to Keel's version so both sides run the same model
code). TRL_VERSION is the last release that still ships `PPOTrainer`/`PPOConfig` (1.12.0, under
`trl.experimental.ppo`; 1.13.0 dropped them); its `RewardTrainer` serves the RM workloads.

Workloads (both sides get the same token ids: Keel's tokenizer code writes the TRL inputs):
- `rm`: Bradley-Terry on the demo pairs, batch 16, max length 256 -> pairs/s;
- `rm_longtail`: the same on `bench.datasets`' long-tail pairs (responses 10..400 tokens), max
  length 512 -> pairs/s;
- `ppo`: batch 16, 32 new tokens, 1 PPO epoch, policy + reference + value + reward models -> generated
  tokens/s.

Each round runs every workload on both sides, Keel first in even rounds and TRL first in odd ones,
each in a fresh subprocess at the same thread count, dtype and gradient-checkpointing setting. The
ratio Keel/TRL is taken per round (neighbouring runs share the machine's load) and summarised by
median and spread over the rounds. For RM workloads the ratio of pairs per CPU-second is reported
too: it is far less sensitive to other processes on a shared machine.
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
TARGETS = {"rm": 1.2, "rm_longtail": 2.0, "ppo": 3.0}
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
    if all(have[n] and have[n].split("+")[0] == v for n, v in want.items()):
        return have
    if not venv_python().exists():
        print(f"creating {VENV}", file=log, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(venv_python()), "-m", "pip", "install", "--quiet"]
    print(f"installing torch=={TORCH_VERSION}, then trl=={TRL_VERSION} into {VENV}", file=log, flush=True)
    subprocess.run([*pip, f"torch=={TORCH_VERSION}"], check=True)
    subprocess.run([*pip, f"torch=={TORCH_VERSION}", f"trl=={TRL_VERSION}",
                    f"transformers=={want['transformers']}"], check=True)
    return {name: _installed(name) or "?" for name in want}


def _write_ids(path: Path, columns: dict[str, list]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({k: pa.array(v, pa.list_(pa.int32())) for k, v in columns.items()}), path)
    return str(path)


def prepare_inputs(assets: dict[str, str], prompt_length: int) -> dict[str, dict[str, str]]:
    """Per workload, the files each side reads: Keel the raw rows, TRL the token ids Keel makes of them."""
    from bench.datasets import longtail_paths
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
        inputs[name] = {"data": data, "val": val, "max_length": str(max_length), "tokens": tokens}
    prompts = tokenize_prompts(load_rows(assets["prompts_train"], "prompts"), tokenizer, prompt_length, "left")
    inputs["ppo"] = {"data": assets["prompts_train"],
                     "tokens": _write_ids(out / "ppo_prompts.parquet", {"prompt_ids": [p.prompt_ids for p in prompts]})}
    return inputs


def commands(workload: str, inputs: dict[str, str], model: str, args) -> dict[str, list[str]]:
    """The Keel and TRL command lines of one workload."""
    common = ["--dtype", args.dtype, "--threads", str(args.threads), "--json"]
    if args.gradient_checkpointing:
        common.append("--gradient-checkpointing")
    trl = [str(venv_python()), str(RUNNER)]
    if workload == "ppo":
        shape = ["--batch", "16", "--response-length", "32", "--steps", str(args.ppo_steps), "--epochs", "1"]
        return {"keel": [sys.executable, "-m", "bench.ppo", "--model", model, "--reward-model", model,
                         "--prompts", inputs["data"], *shape, *common],
                "trl": [*trl, "ppo", "--model", model, "--reward-model", model, "--prompts", inputs["tokens"],
                        *shape, *common]}
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


METRIC = {"rm": "pairs_per_s", "rm_longtail": "pairs_per_s", "ppo": "tokens_per_s"}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="rm,rm_longtail,ppo")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rm-steps", type=int, default=40)
    p.add_argument("--longtail-steps", type=int, default=20)
    p.add_argument("--ppo-steps", type=int, default=5)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--timeout", type=float, default=1800, help="seconds per benchmark subprocess")
    p.add_argument("--setup-only", action="store_true", help="make the venv and inputs, run nothing")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in TARGETS:
            p.error(f"unknown workload {w!r}; choose from {sorted(TARGETS)}")

    versions = ensure_venv()
    assets = demo_assets()
    inputs = prepare_inputs(assets, prompt_length=64)
    if args.setup_only:
        emit({"bench": "compare_trl", "setup": "done", "venv": str(VENV), "versions": versions}, args.json)
        return {}
    runs: dict[str, dict[str, list[dict]]] = {w: {"keel": [], "trl": []} for w in workloads}
    load = []
    start = time.perf_counter()
    for r in range(args.rounds):
        for w in workloads:
            cmds = commands(w, inputs[w], assets["model"], args)
            order = ("keel", "trl") if r % 2 == 0 else ("trl", "keel")
            for side in order:
                load.append(load_average())
                res = run_json(cmds[side], args.timeout)
                runs[w][side].append(res)
                print(f"round {r + 1} {w} {side}: {res.get(METRIC[w], res.get('error'))}", file=sys.stderr,
                      flush=True)
    result: dict = {"bench": "compare_trl", "trl": TRL_VERSION, "versions": versions, "dtype": args.dtype,
                    "threads": args.threads, "gradient_checkpointing": args.gradient_checkpointing,
                    "rounds": args.rounds, "load_avg_1m": spread(load), "wall_s": round(time.perf_counter() - start, 1)}
    for w in workloads:
        metric = METRIC[w]
        pairs = [(k, t) for k, t in zip(runs[w]["keel"], runs[w]["trl"]) if metric in k and metric in t]
        entry: dict = {"metric": metric, "target_ratio": TARGETS[w]}
        errors = [x for side in ("keel", "trl") for x in runs[w][side] if "error" in x]
        if errors:
            entry["errors"] = errors[:2]
        if pairs:
            ratios = [k[metric] / t[metric] for k, t in pairs]
            entry.update({"keel": spread([k[metric] for k, _ in pairs]), "trl": spread([t[metric] for _, t in pairs]),
                          "ratio": spread(ratios), "met": statistics.median(ratios) >= TARGETS[w]})
            if all(k.get("pairs_per_cpu_s") and t.get("pairs_per_cpu_s") for k, t in pairs):
                entry["ratio_cpu_time"] = spread([k["pairs_per_cpu_s"] / t["pairs_per_cpu_s"] for k, t in pairs])
            if w.startswith("rm"):
                entry["padding_efficiency"] = {"keel": pairs[0][0].get("padding_efficiency"),
                                               "trl": pairs[0][1].get("padding_efficiency")}
            if w == "ppo":
                entry["phases_s_keel"] = pairs[-1][0].get("phases_s")
                entry["gen_s_trl"] = pairs[-1][1].get("timing_s/gen")
                entry["step_s_trl"] = pairs[-1][1].get("timing_s/step")
        result[w] = entry
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
