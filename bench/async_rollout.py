"""Pipelined rollout (issue 33) against `sync`, in one run: steps per wall second and learning parity.

    python -m bench.async_rollout [--wide] [--batch 8] [--n 4] [--response-length 32] [--steps 6]
        [--threads 1] [--seeds 3] [--parity-steps 12] [--skip-parity] [--skip-speed] --json

Every run is PPO (GRPO, no critic) with one trainer worker and one rollout worker
(`rollout.colocate: false`, `resources.rollout_workers: 1`, `--threads` CPUs each) on a loopback-only
local Ray started here, so the three modes get the same processes and cores:
`sync` (the trainer waits while the rollout worker generates), `one_step_off`, and `async` with
`max_staleness: 2`.

Speed: per mode, `timing_s/step` of steps 2..N (Ray start-up, loading, step 1 and the final save
left out): median/min/max, steps per wall second = 1 / median, and the ratio to `sync`'s; the
trainer's and the rollout worker's idle shares (`perf/*_idle_frac`, medians). `--wide`: the wide
Llama of `bench.datasets` (hidden 768, 28M parameters), where generation and the update cost
enough for overlap to show (on the demo model per-call overhead dominates).

Learning parity: the learnable rule reward (`bench_lower_half`: the share of response tokens in the
lower half of the vocabulary, about 0.5 untrained), `--seeds` seeds per mode, `--parity-steps`
steps on the demo model. Per step, the band of `sync`'s seeds (min..max of `critic/score/mean`); a
mode is within parity when its seed-mean curve stays inside that band widened by half its width at
every step after the first (`in_band_frac`: the share of steps inside), and its last-3-steps mean
is at least `sync`'s lowest seed's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from bench.common import demo_assets, emit, load_average, spread
from engine.runtime.reporting import RecordingReporter

MODES = {"sync": {"mode": "sync"}, "one_step_off": {"mode": "one_step_off"},
         "async": {"mode": "async", "max_staleness": 2}}
REWARD = "bench_lower_half"


def lower_half(response, ground_truth, *, response_ids, **_):
    """Share of response tokens in the lower half of the demo vocabulary (1024 ids)."""
    return sum(t < 512 for t in response_ids) / max(1, len(response_ids))


def request(model: str, prompts: str, work: str, rollout: dict, *, batch: int, n: int, response_length: int,
            steps: int, threads: int, seed: int, lr: float):
    from engine.config import JobRequest, PPOConfig, Resources, build_config

    cfg = build_config(PPOConfig, {
        "data": {"train_batch_size": batch, "max_prompt_length": 64, "max_response_length": response_length,
                 "truncation": "left"},
        "actor": {"ppo_mini_batch_size": batch, "ppo_epochs": 1, "optim": {"lr": lr}},
        "rollout": {"n": n, "colocate": False, **rollout},
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
        "guardrails": {"rollback_kl": 100.0, "warn_kl": 100.0},
        "trainer": {"total_training_steps": steps, "test_freq": -1, "save_freq": -1},
    })
    return JobRequest(job_id=f"bench-async-{seed}", method="ppo", config=cfg, model_path=model,
                      training_file=prompts, output_dir=f"{work}/out", checkpoint_dir=f"{work}/ckpt", seed=seed,
                      reward={"function": REWARD},
                      resources=Resources(cpus_per_worker=float(threads), rollout_workers=1))


def run(req) -> RecordingReporter:
    from engine.methods.ppo import run_ppo

    reporter = RecordingReporter()
    run_ppo(req, reporter)
    return reporter


def speed(model: str, prompts: str, args) -> dict:
    out: dict = {}
    for name, rollout in MODES.items():
        with tempfile.TemporaryDirectory(prefix="keel-bench-async-") as work:
            rep = run(request(model, prompts, work, rollout, batch=args.batch, n=args.n,
                              response_length=args.response_length, steps=args.steps, threads=args.threads,
                              seed=0, lr=1e-5))
        steps = rep.series("timing_s/step")[1:]
        out[name] = {"step_s": spread(steps), "steps_per_s": round(1.0 / statistics.median(steps), 3),
                     "trainer_idle_frac": round(statistics.median(rep.series("perf/trainer_idle_frac")[1:]), 3),
                     "rollout_idle_frac": round(statistics.median(rep.series("perf/rollout_idle_frac")[1:-1] or [0]), 3),
                     "staleness_max": max(rep.series("rollout/staleness/max"))}
    for name in ("one_step_off", "async"):
        out[name]["speedup_vs_sync"] = round(out[name]["steps_per_s"] / out["sync"]["steps_per_s"], 3)
    return out


def parity(model: str, prompts: str, args) -> dict:
    curves: dict[str, list[list[float]]] = {}
    for name, rollout in MODES.items():
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory(prefix="keel-bench-async-") as work:
                rep = run(request(model, prompts, work, rollout, batch=8, n=4, response_length=8,
                                  steps=args.parity_steps, threads=args.threads, seed=seed, lr=1e-3))
            curves.setdefault(name, []).append(rep.series("critic/score/mean"))
    sync = curves["sync"]
    low = [min(c[i] for c in sync) for i in range(args.parity_steps)]
    high = [max(c[i] for c in sync) for i in range(args.parity_steps)]
    out: dict = {"sync": {"first": round(statistics.mean(c[0] for c in sync), 4),
                          "last3_by_seed": [round(statistics.mean(c[-3:]), 4) for c in sync]}}
    floor = min(statistics.mean(c[-3:]) for c in sync)
    for name in ("one_step_off", "async"):
        mean = [statistics.mean(c[i] for c in curves[name]) for i in range(args.parity_steps)]
        inside = [low[i] - (high[i] - low[i]) / 2 <= mean[i] <= high[i] + (high[i] - low[i]) / 2
                  for i in range(1, args.parity_steps)]
        last3 = [round(statistics.mean(c[-3:]), 4) for c in curves[name]]
        out[name] = {"in_band_frac": round(sum(inside) / len(inside), 3), "last3_by_seed": last3,
                     "within_parity": all(inside) and statistics.mean(last3) >= floor}
    out["curves"] = {k: [[round(x, 4) for x in c] for c in v] for k, v in curves.items()}
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wide", action="store_true", help="the speed part on bench.datasets' wide Llama (28M)")
    p.add_argument("--batch", type=int, default=8, help="prompts per step (speed part)")
    p.add_argument("--n", type=int, default=4, help="samples per prompt (speed part)")
    p.add_argument("--response-length", type=int, default=32, help="max new tokens (speed part)")
    p.add_argument("--steps", type=int, default=6, help="steps per speed run")
    p.add_argument("--threads", type=int, default=1, help="CPUs of each worker (trainer, rollout)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--parity-steps", type=int, default=12)
    p.add_argument("--skip-parity", action="store_true")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)

    import ray

    from bench.ppo import start_private_ray
    from engine.rewards.rules import register_reward

    register_reward(REWARD)(lower_half)
    assets = demo_assets()
    model = assets["model"]
    if args.wide:
        from bench.datasets import wide_model_path

        model = wide_model_path(tokenizer_dir=assets["tokenizer"])
    load_avg = load_average()
    start = time.perf_counter()
    start_private_ray(2 * args.threads)
    try:
        result = {"bench": "async_rollout", "model": "wide" if args.wide else "demo",
                  "config": vars(args)}
        if not args.skip_speed:
            result["speed"] = speed(model, assets["prompts_train"], args)
        if not args.skip_parity:
            result["parity"] = parity(assets["model"], assets["prompts_train"], args)
    finally:
        ray.shutdown()
    result.update(wall_s=round(time.perf_counter() - start, 1), load_avg_1m=load_avg, cpus=os.cpu_count())
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
