"""DPO training throughput (pairs/s), through `engine.methods.dpo.run_dpo` in this process.

    python -m bench.dpo [--model DIR] [--data FILE] [--longtail] [--wide] [--batch-size 16]
        [--max-length 256] [--steps 40] [--dtype float32|bfloat16] [--threads N] [--no-mfu] --json

Runs `run_dpo` as a single-worker job runs (in process, a `RecordingReporter` that also stamps
CPU time, `bench.reward_model.CPUClockReporter`), then reads the per-step metrics:

- `pairs_per_s`, `tokens_per_s` (real tokens), `padding_efficiency`: steps 2..N of `timing_s/step`
  (loading, tokenization, step 1, the final validation and the save excluded);
- `pairs_per_cpu_s`, `tokens_per_cpu_s`: pairs (real tokens) / CPU seconds of this process over
  steps 2..N-1;
- `reference_s`: the one-time reference pass before training (`DPOTask.prepare`: the frozen
  model's log-probs of every train and val pair, cached beside the checkpoints). It is not in the
  steps: TRL's `DPOTrainer` by default runs the reference forward inside every step instead.
  `pairs_per_s_with_reference` spreads it over one epoch of the training pairs:
  `n_train / (reference_s + n_train / pairs_per_s)`;
- `mfu` = 6·N·tokens_per_s / the GEMM peak at the same threads and dtype (the reference forward
  inside a step is not counted: Keel has none there; N includes the LM head, which Keel applies to
  response positions only, so this overstates a little); `mfu_cpu_time` counts CPU seconds /
  threads as the time;
- `final_loss` and the held-out `val_accuracy` (`val/rewards/accuracies`).

Defaults: the demo policy and the demo pairs; --longtail: `bench.datasets`' long-tail pairs
(responses 10..400 tokens); --wide: the wide Llama (28M) instead of the demo one.
Threads: --threads N gives the job N CPUs per worker (the engine sets torch's threads from that,
`engine.runtime.distributed.worker_threads`); without it the job's default resources decide, as in a job
(`cpus_per_worker: auto`, resolved as the service would on this machine: `bench.common.job_resources`).
"""

from __future__ import annotations

import argparse
import tempfile
import time

from bench.common import (
    emit,
    gemm_peak_gflops,
    job_resources,
    load_average,
    matmul_params,
    set_threads,
)
from bench.datasets import preference_inputs
from bench.reward_model import CPUClockReporter, pair_throughput

TIMING_NOTE = ("sum of timing_s/step over steps 2..N; excludes loading, the reference pass (reference_s), "
               "tokenization, step 1, validation, save")


def build_request(model: str, data: str, val_data: str | None, work: str, *, batch_size: int, max_length: int,
                  steps: int, dtype: str, gradient_checkpointing: bool, max_tokens: int, lr: float, beta: float,
                  seed: int, threads: int | None = None):
    from engine.config import DPOConfig, JobRequest, build_config

    cfg = build_config(DPOConfig, {
        "data": {"train_batch_size": batch_size, "max_length": max_length, "truncation": "right"},
        "model": {"dtype": dtype, "enable_gradient_checkpointing": gradient_checkpointing},
        "optim": {"lr": lr},
        "trainer": {"total_training_steps": steps, "test_freq": -1, "save_freq": -1},
        "max_token_len_per_gpu": max_tokens,
        "beta": beta,
    })
    return JobRequest(job_id="bench-dpo", method="dpo", config=cfg, model_path=model, training_file=data,
                      validation_file=val_data, output_dir=f"{work}/out", checkpoint_dir=f"{work}/ckpt",
                      seed=seed, resources=job_resources(threads, "dpo"))


def summarise(reporter: CPUClockReporter, batch_size: int) -> dict:
    """`pair_throughput` of a DPO run (steps 2..N; the reference pass is `reference_seconds`)."""
    return pair_throughput(reporter, batch_size, loss_key="train/loss", accuracy_key="val/rewards/accuracies")


def reference_seconds(reporter: CPUClockReporter) -> tuple[float | None, int | None]:
    """(wall seconds of the reference pass, training pairs): from the job's first log line (the
    pass's own note) back to the reporter's creation, and the `N train` count of the plan line."""
    logs = reporter.of("log")
    note = next((e for e in logs if "reference log-probs" in e["message"]), None)
    plan = next((e for e in logs if " train / " in e["message"]), None)
    n_train = int(plan["message"].split(": ", 1)[1].split(" train", 1)[0]) if plan else None
    return (note["time"] - reporter.created if note else None), n_train


class _Reporter(CPUClockReporter):
    def __init__(self) -> None:
        super().__init__()
        self.created = time.time()


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="policy directory (default: the demo Llama)")
    p.add_argument("--data", help="preference parquet/jsonl (default: the demo pairs, or --longtail)")
    p.add_argument("--val-data", help="held-out pairs (default: the matching demo/long-tail file)")
    p.add_argument("--longtail", action="store_true", help="use bench.datasets' long-tail pairs")
    p.add_argument("--wide", action="store_true", help="use bench.datasets' wide Llama (28M) as --model")
    p.add_argument("--batch-size", type=int, default=16, help="pairs per optimizer step")
    p.add_argument("--max-length", type=int, default=256, help="tokens per sequence (longer ones are cut)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--max-tokens", type=int, default=3072, help="max_token_len_per_gpu (token budget)")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="CPUs of the job's worker, hence torch threads (default: a job's default, `auto`, "
                        "resolved for this machine)")
    p.add_argument("--peak-gflops", type=float, default=None, help="GEMM peak to use (default: measure it)")
    p.add_argument("--no-mfu", action="store_true", help="skip the GEMM measurement (mfu: null)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)

    from engine.methods.dpo import run_dpo
    from engine.runtime.distributed import worker_threads

    threads = set_threads(worker_threads(job_resources(args.threads, "dpo")))
    model, data, val_data = preference_inputs(args)

    load_avg = load_average()
    with tempfile.TemporaryDirectory(prefix="keel-bench-dpo-") as work:
        request = build_request(model, data, val_data, work, batch_size=args.batch_size, max_length=args.max_length,
                                steps=args.steps, dtype=args.dtype, gradient_checkpointing=args.gradient_checkpointing,
                                max_tokens=args.max_tokens, lr=args.lr, beta=args.beta, seed=args.seed,
                                threads=args.threads)
        reporter = _Reporter()
        start = time.perf_counter()
        run_dpo(request, reporter)
        wall = time.perf_counter() - start
    result = {"bench": "dpo", "dtype": args.dtype, "threads": threads, "threads_setting": args.threads or "default",
              "batch_size": args.batch_size, "max_length": args.max_length, "steps": args.steps, "data": data,
              "gradient_checkpointing": args.gradient_checkpointing, **summarise(reporter, args.batch_size)}
    ref_s, n_train = reference_seconds(reporter)
    if ref_s is not None and n_train:
        result["reference_s"] = round(ref_s, 3)
        result["pairs_per_s_with_reference"] = round(n_train / (ref_s + n_train / result["pairs_per_s"]), 2)
    peak = None if args.no_mfu else args.peak_gflops or gemm_peak_gflops(args.dtype, threads)
    n = matmul_params(model, head="lm_head")
    result.update({
        "params_matmul": n, "gemm_peak_gflops": round(peak, 1) if peak else None,
        "mfu": round(6 * n * result["tokens_per_s"] / (peak * 1e9), 4) if peak else None,
        # CPU seconds / threads as the time: what the steps take with their threads to themselves.
        "mfu_cpu_time": (round(6 * n * result["tokens_per_cpu_s"] * threads / (peak * 1e9), 4)
                         if peak and result["tokens_per_cpu_s"] else None),
        "wall_s": round(wall, 2), "timing": TIMING_NOTE, "load_avg_1m": load_avg,
    })
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
