"""Pipelined rollout (issue 33) against `sync`, in one run: steps per wall second and learning parity.

    python -m bench.async_rollout [--wide] [--batch 8] [--n 4] [--response-length 32] [--steps 6]
        [--repeats 2] [--weight-sync object_store|collective] [--threads 1] [--seeds 3] [--parity-steps 12]
        [--skip-parity] [--skip-speed] --json

Every run is PPO (GRPO, no critic) with one trainer worker and one rollout worker
(`rollout.colocate: false`, `resources.rollout_workers: 1`, `--threads` CPUs each) on a loopback-only
local Ray started here, so the three modes get the same processes and cores:
`sync` (the trainer waits while the rollout worker generates), `one_step_off`, and `async` with
`max_staleness: 2`.

Speed: `--repeats` rounds, each running the three modes one after the other (so a change in the
machine's load falls on all three); per run, `timing_s/step` of steps 2..N (Ray start-up, loading,
step 1 and the final save left out), its median giving steps per wall second. Per mode: the step
times of all rounds (median/min/max), steps/s, and the ratio to `sync`'s steps/s per round
(median/min/max over rounds); the trainer's and the rollout worker's idle shares (`perf/*_idle_frac`,
medians). `--wide`: the wide Llama of `bench.datasets` (hidden 768, 28M parameters), where
generation and the update cost enough for overlap to show (on the demo model per-call overhead
dominates).

Learning parity (the demo model, `--seeds` seeds per mode, `--parity-steps` steps, the learnable rule
reward `bench_lower_half`: the share of response tokens in the lower half of the vocabulary): the
measure is the reward of the policy each step produced, i.e. validation after every step, sampled
(`val_temperature: 1`) with the same row seeds in every mode on the 64 validation prompts, as the
gain over the run's own step-0 validation (as tests/engine/test_async_parity.py). A mode is within
parity when its seed-mean gain lies within [lowest, highest] `sync` seed at every step, widened by
`TOLERANCE` (two of the 512 validation tokens). Also reported: the training batches' reward per step
against `sync`'s (`train_lag`): a pipelined batch is sampled by a policy `staleness` updates older,
so that curve trails by construction.
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
TOLERANCE = 2 / 512


def lower_half(response, ground_truth, *, response_ids, **_):
    """Share of response tokens in the lower half of the demo vocabulary (1024 ids)."""
    return sum(t < 512 for t in response_ids) / max(1, len(response_ids))


def request(model: str, prompts: str, work: str, rollout: dict, *, batch: int, n: int, response_length: int,
            steps: int, threads: int, seed: int, lr: float, validation: str | None = None):
    from engine.config import JobRequest, PPOConfig, Resources, build_config

    cfg = build_config(PPOConfig, {
        "data": {"train_batch_size": batch, "max_prompt_length": 64, "max_response_length": response_length,
                 "truncation": "left"},
        "actor": {"ppo_mini_batch_size": batch, "ppo_epochs": 1, "optim": {"lr": lr}},
        "rollout": {"n": n, "colocate": False, "val_temperature": 1.0, **rollout},
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
        "guardrails": {"rollback_kl": 100.0, "warn_kl": 100.0},
        "trainer": {"total_training_steps": steps, "test_freq": 1 if validation else -1, "save_freq": -1},
    })
    return JobRequest(job_id=f"bench-async-{seed}", method="ppo", config=cfg, model_path=model,
                      training_file=prompts, validation_file=validation, output_dir=f"{work}/out", checkpoint_dir=f"{work}/ckpt", seed=seed,
                      reward={"function": REWARD},
                      resources=Resources(cpus_per_worker=float(threads), rollout_workers=1))


def run(req) -> RecordingReporter:
    from engine.methods.ppo import run_ppo

    reporter = RecordingReporter()
    run_ppo(req, reporter)
    return reporter


def speed(model: str, prompts: str, args) -> dict:
    runs: dict[str, list[RecordingReporter]] = {name: [] for name in MODES}
    for _ in range(args.repeats):
        for name, rollout in MODES.items():
            with tempfile.TemporaryDirectory(prefix="keel-bench-async-") as work:
                sync = {"weight_sync": args.weight_sync} if args.weight_sync else {}
                runs[name].append(run(request(model, prompts, work, {**rollout, **sync}, batch=args.batch, n=args.n,
                                              response_length=args.response_length, steps=args.steps,
                                              threads=args.threads, seed=0, lr=1e-5)))
    rate = {name: [1.0 / statistics.median(r.series("timing_s/step")[1:]) for r in reps] for name, reps in runs.items()}
    out: dict = {}
    for name, reps in runs.items():
        out[name] = {"step_s": spread([t for r in reps for t in r.series("timing_s/step")[1:]]),
                     "steps_per_s": spread(rate[name]),
                     "trainer_idle_frac": round(statistics.median(
                         [x for r in reps for x in r.series("perf/trainer_idle_frac")[1:]]), 3),
                     "rollout_idle_frac": round(statistics.median(
                         [x for r in reps for x in r.series("perf/rollout_idle_frac")[1:-1]] or [0]), 3),
                     "staleness_max": max(max(r.series("rollout/staleness/max")) for r in reps)}
    for name in ("one_step_off", "async"):
        out[name]["speedup_vs_sync"] = spread([a / b for a, b in zip(rate[name], rate["sync"])])
    return out


def parity(model: str, prompts: str, validation: str, args) -> dict:
    gains: dict[str, list[list[float]]] = {}
    train: dict[str, list[list[float]]] = {}
    for name, rollout in MODES.items():
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory(prefix="keel-bench-async-") as work:
                rep = run(request(model, prompts, work, rollout, batch=8, n=4, response_length=8,
                                  steps=args.parity_steps, threads=args.threads, seed=seed, lr=1e-3,
                                  validation=validation))
            val = rep.series("val/reward/mean")
            gains.setdefault(name, []).append([v - val[0] for v in val[1:]])
            train.setdefault(name, []).append(rep.series("critic/score/mean"))
    steps = range(args.parity_steps)
    low = [min(c[i] for c in gains["sync"]) for i in steps]
    high = [max(c[i] for c in gains["sync"]) for i in steps]
    sync_train = [statistics.mean(c[i] for c in train["sync"]) for i in steps]
    out: dict = {"sync": {"final_gain_by_seed": [round(c[-1], 4) for c in gains["sync"]]}}
    for name in ("one_step_off", "async"):
        mean = [statistics.mean(c[i] for c in gains[name]) for i in steps]
        inside = [low[i] - TOLERANCE <= mean[i] <= high[i] + TOLERANCE for i in steps]
        lag = [statistics.mean(c[i] for c in train[name]) - sync_train[i] for i in steps]
        out[name] = {"steps_inside": f"{sum(inside)} of {len(inside)}", "within_parity": all(inside),
                     "final_gain_by_seed": [round(c[-1], 4) for c in gains[name]],
                     "final_gain_mean": round(mean[-1], 4),
                     "train_lag_mean": round(statistics.mean(lag[1:]), 4)}
    out["sync_band_final"] = [round(low[-1], 4), round(high[-1], 4)]
    out["gains"] = {k: [[round(x, 4) for x in c] for c in v] for k, v in gains.items()}
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wide", action="store_true", help="the speed part on bench.datasets' wide Llama (28M)")
    p.add_argument("--batch", type=int, default=8, help="prompts per step (speed part)")
    p.add_argument("--n", type=int, default=4, help="samples per prompt (speed part)")
    p.add_argument("--response-length", type=int, default=32, help="max new tokens (speed part)")
    p.add_argument("--steps", type=int, default=6, help="steps per speed run")
    p.add_argument("--repeats", type=int, default=2, help="rounds of the three speed runs")
    p.add_argument("--weight-sync", choices=["object_store", "collective"], default=None,
                   help="rollout.weight_sync of the speed runs (unset: the engine's default, object_store on CPU)")
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
            result["parity"] = parity(assets["model"], assets["prompts_train"], assets["prompts_val"], args)
    finally:
        ray.shutdown()
    result.update(wall_s=round(time.perf_counter() - start, 1), load_avg_1m=load_avg, cpus=os.cpu_count())
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
