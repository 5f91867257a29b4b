"""PPO iteration throughput (generation, scoring, updates), through `engine.ppo.run_ppo` on a local Ray.

    python -m bench.ppo [--model DIR] [--reward-model DIR] [--prompts FILE] [--batch 16]
        [--response-length 32] [--steps 5] [--epochs 1] [--dtype float32|bfloat16] [--threads N] --json

One PPO iteration = generate `--batch` responses (rollout.n = 1) of up to --response-length tokens,
old / reference log-probs, values, reward-model scores, GAE, then one critic and one actor update
over the whole batch (`--epochs` PPO epochs, one mini-batch), as VERL's loop does. The roles (actor,
critic, reference, reward) are Ray actors on a loopback-only local Ray started here.

Timing: steps 2..N of the reporter's `timing_s/step` (the whole iteration as the driver sees it;
Ray start-up, model loading, the first iteration, and the final checkpoint and save are excluded).
`tokens_per_s` = generated response tokens (`response_length/mean` x batch) / that time. The
per-phase split is the mean of each `timing_s/*` metric over the same steps; phases that run
concurrently on different roles (old/ref log-probs, values, reward) overlap, so they need not add
up to `timing_s/step`.

Defaults: the demo policy, the demo model as reward model (a fresh, seeded score head), the demo
prompts (`bench/out/demo`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from bench.common import demo_assets, emit, load_average, set_threads

TIMING_NOTE = "mean over steps 2..N of timing_s/*; excludes Ray start-up, loading, step 1, final checkpoint/save"


def build_request(model: str, reward_model: str, prompts: str, work: str, *, batch: int, response_length: int,
                  prompt_length: int, steps: int, epochs: int, dtype: str, gradient_checkpointing: bool,
                  threads: int, seed: int):
    from engine.config import JobRequest, PPOConfig, Resources, build_config

    cfg = build_config(PPOConfig, {
        "data": {"train_batch_size": batch, "max_prompt_length": prompt_length,
                 "max_response_length": response_length, "truncation": "left"},
        "model": {"dtype": dtype, "enable_gradient_checkpointing": gradient_checkpointing},
        "actor": {"ppo_mini_batch_size": batch, "ppo_epochs": epochs},
        "critic": {"ppo_mini_batch_size": batch, "ppo_epochs": epochs},
        "rollout": {"n": 1, "temperature": 1.0},
        "trainer": {"total_training_steps": steps, "test_freq": -1, "save_freq": -1},
    })
    return JobRequest(job_id="bench-ppo", method="ppo", config=cfg, model_path=model, training_file=prompts,
                      output_dir=f"{work}/out", checkpoint_dir=f"{work}/ckpt", seed=seed,
                      reward={"model_path": reward_model},
                      resources=Resources(num_workers=1, cpus_per_worker=float(threads)))


def start_private_ray(cpus: int) -> None:
    """A loopback-only Ray of our own. `address="local"` matters on a shared machine: a bare
    `ray.init()` joins whatever cluster `ray start` left in /tmp/ray, and its CPUs are not ours."""
    import ray

    # As engine.cluster.connect does: no non-loopback address, no usage reporting.
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="keel", log_to_driver=False)


def summarise(reporter, batch: int) -> dict:
    events = reporter.of("metrics")
    timed = [e["values"] for e in events if e["step"] >= 2] or [e["values"] for e in events]
    seconds = sum(v["timing_s/step"] for v in timed)
    tokens = sum(v["response_length/mean"] * batch for v in timed)
    phases = sorted({k for v in timed for k in v if k.startswith("timing_s/")})
    return {"timed_steps": len(timed), "timed_s": round(seconds, 3), "generated_tokens": round(tokens),
            "tokens_per_s": round(tokens / seconds, 2),
            "phases_s": {k.removeprefix("timing_s/"): round(sum(v.get(k, 0.0) for v in timed) / len(timed), 4)
                         for k in phases},
            "response_length_mean": round(sum(v["response_length/mean"] for v in timed) / len(timed), 2)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="policy directory (default: the demo Llama)")
    p.add_argument("--reward-model", help="reward model directory (default: the demo Llama, fresh score head)")
    p.add_argument("--prompts", help="prompts parquet/jsonl (default: the demo prompts)")
    p.add_argument("--batch", type=int, default=16, help="prompts per iteration")
    p.add_argument("--response-length", type=int, default=32, help="max new tokens per response")
    p.add_argument("--prompt-length", type=int, default=64, help="max prompt tokens (longer: cut on the left)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--epochs", type=int, default=1, help="PPO epochs per batch")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="CPUs for the local Ray and torch (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)

    threads = set_threads(args.threads)
    model, reward_model, prompts = args.model, args.reward_model, args.prompts
    if not (model and reward_model and prompts):
        assets = demo_assets()
        model, reward_model = model or assets["model"], reward_model or assets["model"]
        prompts = prompts or assets["prompts_train"]

    import ray

    from engine.ppo import run_ppo
    from engine.reporting import RecordingReporter

    load_avg = load_average()
    start_private_ray(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="keel-bench-ppo-") as work:
            request = build_request(model, reward_model, prompts, work, batch=args.batch,
                                    response_length=args.response_length, prompt_length=args.prompt_length,
                                    steps=args.steps, epochs=args.epochs, dtype=args.dtype,
                                    gradient_checkpointing=args.gradient_checkpointing, threads=threads,
                                    seed=args.seed)
            reporter = RecordingReporter()
            start = time.perf_counter()
            run_ppo(request, reporter)
            wall = time.perf_counter() - start
    finally:
        ray.shutdown()
    result = {"bench": "ppo", "dtype": args.dtype, "threads": threads, "batch": args.batch,
              "response_length": args.response_length, "steps": args.steps, "epochs": args.epochs,
              "gradient_checkpointing": args.gradient_checkpointing, **summarise(reporter, args.batch),
              "wall_s": round(wall, 2), "timing": TIMING_NOTE, "load_avg_1m": load_avg,
              "cpus": os.cpu_count()}
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
