"""Bradley-Terry reward-model training throughput, through the engine entry point.

    python -m bench.reward_model [--model DIR] [--data FILE] [--val-data FILE] [--batch-size 16]
        [--max-length 256] [--steps 100] [--dtype float32|bfloat16] [--threads N]
        [--longtail] [--gradient-checkpointing] [--max-tokens 3072] [--peak-gflops X]
        [--no-remove-padding] [--packing-compare --rounds 3] --json

Runs `engine.methods.reward_model.run_reward_model` in this process (one worker, as a single-worker job
runs) with a `RecordingReporter`, then reads the per-step metrics it reported:

- timing: the sum of `timing_s/step` over steps 2..N. Model loading, tokenization, the first step
  (allocator and kernel warm-up), the final validation and the save are excluded;
- `pairs_per_s` = pairs trained in those steps / that time; `tokens_per_s` = real (non-pad) tokens
  / that time (`perf/tokens_per_s` x `timing_s/step`, summed);
- `mfu` = 6 x N x tokens_per_s / the GEMM peak measured here at the same thread count and dtype
  (`bench.gemm`), N = the parameters that do matrix products (`bench.common.matmul_params`);
- `padding_efficiency` = real / computed tokens over the timed steps (token-budget micro-batches);
- `pairs_per_cpu_s` = pairs / CPU seconds of this process (steps 2..N-1); `tokens_per_core_s` and
  `mfu_cpu_time` count CPU seconds / threads as the time: on a shared machine, where other processes
  take cores away mid-step, that is close to what the step takes with its threads to itself
  (exact with --threads 1; with more threads, time spent spinning in OpenMP counts too);
- `final_loss` (`rm/loss` of the last step) and `val_accuracy` (`val/rm/accuracy` at the end).

Without --model/--data the demo assets are used (`bench/out/demo`, built on first use); --longtail
trains on `bench.datasets`' long-tail pairs (responses 10..400 tokens) instead of the demo pairs;
--wide trains `bench.datasets`' wide Llama (hidden 768, 4 layers, 28M parameters) instead of the
demo Llama (hidden 128, 0.3M parameters besides embeddings, overhead-bound): MFU is a property of
the shapes as much as of the code.

`model.use_remove_padding` (sequence packing, `engine.packing`) is on, as in a job's defaults;
--no-remove-padding runs the padded (length-grouped) forwards instead. --packing-compare runs the
same job --rounds times each way, alternating which goes first, and prints per-round packed/padded
ratios of `tokens_per_s` (wall) and `tokens_per_core_s` (CPU time) as median/min/max, with each
mode's padding efficiency and final loss (equal losses: both runs trained the same model).
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time

from bench.common import (
    emit,
    gemm_peak_gflops,
    job_resources,
    load_average,
    matmul_params,
    set_threads,
    spread,
)
from bench.datasets import preference_inputs
from engine.runtime.reporting import RecordingReporter

TIMING_NOTE = "sum of timing_s/step over steps 2..N; excludes loading, tokenization, step 1, validation, save"


def build_request(model: str, data: str, val_data: str | None, work: str, *, batch_size: int, max_length: int,
                  steps: int, dtype: str, gradient_checkpointing: bool, max_tokens: int, lr: float, seed: int,
                  remove_padding: bool = True, threads: int | None = None):
    from engine.config import JobRequest, RewardModelConfig, build_config

    cfg = build_config(RewardModelConfig, {
        "data": {"train_batch_size": batch_size, "max_length": max_length, "truncation": "right"},
        "model": {"dtype": dtype, "enable_gradient_checkpointing": gradient_checkpointing,
                  "use_remove_padding": remove_padding},
        "optim": {"lr": lr},
        "trainer": {"total_training_steps": steps, "test_freq": -1, "save_freq": -1},
        "max_token_len_per_gpu": max_tokens,
    })
    return JobRequest(job_id="bench-rm", method="reward_model", config=cfg, model_path=model,
                      training_file=data, validation_file=val_data, output_dir=f"{work}/out",
                      checkpoint_dir=f"{work}/ckpt", seed=seed, resources=job_resources(threads, "reward_model"))


class CPUClockReporter(RecordingReporter):
    """A `RecordingReporter` that also stamps each event with this process's CPU time: on a shared
    machine, CPU seconds per step are what the step would take alone on the threads it uses."""

    def _add(self, kind, **data):
        super()._add(kind, cpu=time.process_time(), **data)


def pair_throughput(reporter, batch_size: int, *, loss_key: str, accuracy_key: str,
                    threads: int | None = None) -> dict:
    """Throughput over steps 2..N from a pairwise job's per-step metrics (reward model, DPO). CPU
    time per token is per core (`tokens_per_core_s`, over `threads`) when `threads` is given, else
    per CPU-second of the process (`tokens_per_cpu_s`)."""
    events = reporter.of("metrics")
    timed = [e["values"] for e in events if e["step"] >= 2] or [e["values"] for e in events]
    seconds = sum(v["timing_s/step"] for v in timed)
    real = sum(v["perf/tokens_per_s"] * v["timing_s/step"] for v in timed)
    computed = sum(v["perf/tokens_per_s"] * v["timing_s/step"] / max(v["perf/padding_efficiency"], 1e-9)
                   for v in timed)
    # CPU time between consecutive metrics events of steps 2..N-1 (step N also validates).
    spans = [(b["cpu"] - a["cpu"], b["values"]) for a, b in itertools.pairwise(events)
             if 2 <= b["step"] < events[-1]["step"]]
    cpu = sum(c for c, _ in spans)
    cpu_tokens = sum(v["perf/tokens_per_s"] * v["timing_s/step"] for _, v in spans)
    per_cpu = ("tokens_per_cpu_s", round(cpu_tokens / cpu, 1) if cpu else None) if threads is None else \
        ("tokens_per_core_s", round(cpu_tokens / (cpu / threads), 1) if cpu else None)
    last = events[-1]["values"]
    return {"timed_steps": len(timed), "timed_s": round(seconds, 3),
            "pairs_per_s": round(batch_size * len(timed) / seconds, 2),
            "tokens_per_s": round(real / seconds, 1),
            "padding_efficiency": round(real / computed, 4) if computed else 1.0,
            "pairs_per_cpu_s": round(batch_size * len(spans) / cpu, 2) if cpu else None,
            per_cpu[0]: per_cpu[1],
            "final_loss": round(last[loss_key], 4),
            "val_accuracy": round(last[accuracy_key], 4) if accuracy_key in last else None}


def summarise(reporter, batch_size: int, threads: int) -> dict:
    """`pair_throughput` of a reward-model run."""
    return pair_throughput(reporter, batch_size, loss_key="rm/loss", accuracy_key="val/rm/accuracy", threads=threads)


def run_once(model: str, data: str, val_data: str | None, args: argparse.Namespace, threads: int, *,
             remove_padding: bool) -> tuple[dict, float]:
    """One training run in this process: (`summarise` of its steps, wall seconds)."""
    from engine.methods.reward_model import run_reward_model

    with tempfile.TemporaryDirectory(prefix="keel-bench-rm-") as work:
        request = build_request(model, data, val_data, work, batch_size=args.batch_size,
                                max_length=args.max_length, steps=args.steps, dtype=args.dtype,
                                gradient_checkpointing=args.gradient_checkpointing, max_tokens=args.max_tokens,
                                lr=args.lr, seed=args.seed, remove_padding=remove_padding, threads=args.threads)
        reporter = CPUClockReporter()
        start = time.perf_counter()
        run_reward_model(request, reporter)
        return summarise(reporter, args.batch_size, threads), time.perf_counter() - start


def compare_packing(model: str, data: str, val_data: str | None, args: argparse.Namespace, threads: int) -> dict:
    """`--rounds` rounds of a packed and a padded run of the same job, alternating which goes first
    (so drift in the machine's load hits both); the ratios are taken within each round."""
    runs: dict[str, list[dict]] = {"packed": [], "padded": []}
    loads = []
    for r in range(args.rounds):
        loads.append(load_average())
        for mode in (("packed", "padded") if r % 2 == 0 else ("padded", "packed")):
            summary, _ = run_once(model, data, val_data, args, threads, remove_padding=mode == "packed")
            runs[mode].append(summary)

    def ratios(key: str) -> dict | None:
        pairs = [(a[key], b[key]) for a, b in zip(runs["packed"], runs["padded"])]
        return spread([a / b for a, b in pairs]) if all(a and b for a, b in pairs) else None

    def per_mode(key: str) -> dict:
        return {mode: spread([run[key] for run in rs]) for mode, rs in runs.items() if all(run[key] for run in rs)}

    return {"bench": "reward_model_packing", "dtype": args.dtype, "threads": threads, "batch_size": args.batch_size,
            "max_length": args.max_length, "steps": args.steps, "max_tokens": args.max_tokens, "data": data,
            "rounds": args.rounds,
            "tokens_per_s_ratio": ratios("tokens_per_s"), "tokens_per_core_s_ratio": ratios("tokens_per_core_s"),
            "tokens_per_s": per_mode("tokens_per_s"), "tokens_per_core_s": per_mode("tokens_per_core_s"),
            "padding_efficiency": per_mode("padding_efficiency"), "final_loss": per_mode("final_loss"),
            "runs": runs, "timing": TIMING_NOTE, "load_avg_1m": loads}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model directory (default: the demo Llama)")
    p.add_argument("--data", help="preference parquet/jsonl (default: demo pairs, or --longtail)")
    p.add_argument("--val-data", help="held-out pairs (default: the matching demo/long-tail file; with "
                                      "--data alone, a seeded 10%% of it)")
    p.add_argument("--longtail", action="store_true", help="use bench.datasets' long-tail pairs")
    p.add_argument("--wide", action="store_true", help="use bench.datasets' wide Llama (28M) as --model")
    p.add_argument("--batch-size", type=int, default=16, help="pairs per optimizer step")
    p.add_argument("--max-length", type=int, default=256, help="tokens per sequence (longer ones are cut)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--max-tokens", type=int, default=3072, help="max_token_len_per_gpu (token budget)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="CPUs of the job's worker, hence torch threads (default: a job's default, `auto`, "
                        "resolved for this machine)")
    p.add_argument("--peak-gflops", type=float, default=None, help="GEMM peak to use (default: measure it)")
    p.add_argument("--no-mfu", action="store_true", help="skip the GEMM measurement (mfu: null)")
    p.add_argument("--no-remove-padding", action="store_true",
                   help="model.use_remove_padding=false: padded (length-grouped) forwards instead of packed rows")
    p.add_argument("--packing-compare", action="store_true",
                   help="alternate packed and padded runs (--rounds each) and print their tokens/s ratio")
    p.add_argument("--rounds", type=int, default=3, help="--packing-compare: rounds of (packed, padded)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)

    from engine.runtime.distributed import worker_threads

    # What the job's worker will use (--threads, else a job's default resources); the GEMM peak too.
    threads = set_threads(worker_threads(job_resources(args.threads, "reward_model")))
    model, data, val_data = preference_inputs(args)

    if args.packing_compare:
        result = compare_packing(model, data, val_data, args, threads)
        emit(result, args.json)
        return result
    load_avg = load_average()
    summary, wall = run_once(model, data, val_data, args, threads, remove_padding=not args.no_remove_padding)
    result = {"bench": "reward_model", "dtype": args.dtype, "threads": threads, "batch_size": args.batch_size,
              "max_length": args.max_length, "steps": args.steps, "data": data,
              "gradient_checkpointing": args.gradient_checkpointing,
              "use_remove_padding": not args.no_remove_padding, **summary}
    peak = None if args.no_mfu else args.peak_gflops or gemm_peak_gflops(args.dtype, threads)
    n = matmul_params(model, head="score")
    result.update({
        "params_matmul": n,
        "model_gflops_per_s": round(6 * n * result["tokens_per_s"] / 1e9, 2),
        "gemm_peak_gflops": round(peak, 1) if peak else None,
        "mfu": round(6 * n * result["tokens_per_s"] / (peak * 1e9), 4) if peak else None,
        "mfu_cpu_time": (round(6 * n * result["tokens_per_core_s"] / (peak * 1e9), 4)
                         if peak and result["tokens_per_core_s"] else None),
        "wall_s": round(wall, 2), "timing": TIMING_NOTE,
        "load_avg_1m": load_avg,
    })
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
