"""PPO iteration throughput (generation, scoring, updates), through `engine.methods.ppo.run_ppo` on a local Ray.

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
prompts (`bench/out/demo`). `--wide`: `bench.datasets`' wide Llama (hidden 768, 28M parameters) as
policy and reward model, where matrix products and not per-op overhead set the pace.

`mfu` = the iteration's model FLOPs / its time / the GEMM peak measured here with every core the
local Ray has (`--no-mfu` skips the measurement). Model FLOPs count 2 x N per token for a forward
and 6 x N for a forward and backward, N = the role's matmul parameters (`bench.common.matmul_params`),
over every token of every sample (prompt + response): generation (prefill and decode), the
reference log-probs, the old log-probs when that pass runs, reward scores, values, and the updates
(`--epochs` times). Attention's `seq^2` term is left out, so it understates a little. With
`--n` > 1 Keel computes each prompt once for its samples (generation's prefill, the reference pass
and the update): `mfu_prompt_once` counts those FLOPs, what actually ran.
`mfu_cpu_time` uses CPU seconds (every process of the job) / cores as the time instead.

`--step-cost --repeat N` measures what one update step costs instead, in this process (no Ray, no
reference or reward model: advantages are seeded noise): per iteration, the rollback snapshot of
actor and critic, generation, old log-probs, values, the critic update and the actor update
(including whatever the actor does for the KL guardrail). It prints median/min/max over N
iterations (after one warm-up) of the iteration (`step_ms`), of the snapshot (`snapshot_ms`) and of
each phase, and `snapshot_share` = snapshot / iteration (medians). It uses only the role classes'
public verbs, so the same file measures an older engine too (run it with that tree first on
`PYTHONPATH`): that is how docs/benchmarks.md compares before and after.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from bench.common import (
    demo_assets,
    emit,
    gemm_peak_gflops,
    job_resources,
    load_average,
    matmul_params,
    set_threads,
    spread,
    tree_cpu_seconds,
    usable_cores,
)
from engine.runtime.reporting import RecordingReporter

TIMING_NOTE = "mean over steps 2..N of timing_s/*; excludes Ray start-up, loading, step 1, final checkpoint/save"


GRPO_KL_COEF = 0.04
"""GRPO's KL-to-reference loss weight (DeepSeekMath's beta; TRL's `GRPOConfig.beta` is set to match)."""


def build_request(model: str, reward_model: str | None, prompts: str, work: str, *, batch: int,
                  response_length: int, prompt_length: int, steps: int, epochs: int, dtype: str,
                  gradient_checkpointing: bool, threads: int | None, seed: int, packing: bool = True,
                  adv_estimator: str = "gae", n: int = 1, reward_function: str | None = None):
    """A PPO job request. `threads` None: the job's default resources, `cpus_per_worker: auto` resolved
    for this machine as the service would (`bench.common.job_resources`; the engine picks the thread
    count from `resources.cpus_per_worker`, as for any job). `adv_estimator` `grpo`: no critic, the
    KL to the reference as a loss term (`actor.use_kl_loss`, k3) instead of in the reward, as GRPO
    runs; `reward_function` names a rule reward (`engine.rewards.rules`) instead of `reward_model`."""
    from engine.config import JobRequest, PPOConfig, build_config

    algorithm: dict = {"adv_estimator": adv_estimator}
    actor: dict = {"ppo_mini_batch_size": batch, "ppo_epochs": epochs}
    if adv_estimator != "gae":
        algorithm["use_kl_in_reward"] = False
        actor.update(use_kl_loss=True, kl_loss_coef=GRPO_KL_COEF, kl_loss_type="low_var_kl")
    cfg = build_config(PPOConfig, {
        "data": {"train_batch_size": batch, "max_prompt_length": prompt_length,
                 "max_response_length": response_length, "truncation": "left"},
        "model": {"dtype": dtype, "enable_gradient_checkpointing": gradient_checkpointing,
                  "use_remove_padding": packing},
        "actor": actor,
        "critic": {"ppo_mini_batch_size": batch, "ppo_epochs": epochs},
        "rollout": {"n": n, "temperature": 1.0},
        "algorithm": algorithm,
        "trainer": {"total_training_steps": steps, "test_freq": -1, "save_freq": -1},
    })
    reward = {"function": reward_function} if reward_function else {"model_path": reward_model}
    resources = job_resources(threads, "ppo")
    return JobRequest(job_id="bench-ppo", method="ppo", config=cfg, model_path=model, training_file=prompts,
                      output_dir=f"{work}/out", checkpoint_dir=f"{work}/ckpt", seed=seed,
                      reward=reward, resources=resources)


def start_private_ray(cpus: int) -> None:
    """A loopback-only Ray of our own. `address="local"` matters on a shared machine: a bare
    `ray.init()` joins whatever cluster `ray start` left in /tmp/ray, and its CPUs are not ours."""
    import ray

    # As engine.runtime.cluster.connect does: no non-loopback address, no usage reporting.
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="keel", log_to_driver=False)


class TreeCPUReporter(RecordingReporter):
    """A `RecordingReporter` that stamps each metrics event with the CPU seconds of this process and
    all its descendants (the local Ray's raylet, GCS and the role workers): what the whole job
    cost, on a shared machine far steadier than wall time."""

    def _add(self, kind, **data):
        if kind == "metrics":
            data["cpu"] = tree_cpu_seconds()
        super()._add(kind, **data)

    def cpu_summary(self, samples: int) -> dict:
        """Generated tokens per CPU-second over steps 2..N (the CPU time between the end of step 1
        and the end of step N, Ray's own processes included)."""
        events = self.of("metrics")
        if len(events) < 2:
            return {}
        timed = events[1:]
        cpu = timed[-1]["cpu"] - events[0]["cpu"]
        tokens = sum(e["values"]["response_length/mean"] * samples for e in timed)
        return {"cpu_s": round(cpu, 3), "tokens_per_cpu_s": round(tokens / cpu, 2) if cpu > 0 else None}


def iteration_flops(metrics: dict, samples: int, *, policy: int, critic: int | None, reward: int | None,
                    epochs: int, prompts: int | None = None) -> float:
    """Model FLOPs of one PPO iteration from its metrics (see the module docstring). `policy`,
    `critic`, `reward`: matmul parameters of each role's model (None: the role does not run).
    `prompts`: count each of that many distinct prompts once in the policy's passes (what Keel
    executes when the samples of a prompt share it: `engine.rollout.decode`'s prefill, `engine.rollout.prefix`)
    instead of once per sample."""
    tokens = samples * (metrics["prompt_length/mean"] + metrics["response_length/mean"])
    policy_tokens = tokens if prompts is None else (prompts * metrics["prompt_length/mean"]
                                                    + samples * metrics["response_length/mean"])
    forwards = 2 + ("timing_s/old_log_prob" in metrics)  # generation, reference (+ old log-probs)
    flops = (2 * forwards + 6 * epochs) * policy * policy_tokens
    if critic is not None:
        flops += (2 + 6 * epochs) * critic * tokens
    if reward is not None:
        flops += 2 * reward * tokens
    return float(flops)


def summarise(reporter, samples: int) -> dict:
    """Throughput over steps 2..N; `samples` = responses per iteration (prompts x rollout.n)."""
    events = reporter.of("metrics")
    timed = [e["values"] for e in events if e["step"] >= 2] or [e["values"] for e in events]
    seconds = sum(v["timing_s/step"] for v in timed)
    tokens = sum(v["response_length/mean"] * samples for v in timed)
    phases = sorted({k for v in timed for k in v if k.startswith("timing_s/")})
    return {"timed_steps": len(timed), "timed_s": round(seconds, 3), "generated_tokens": round(tokens),
            "tokens_per_s": round(tokens / seconds, 2),
            "phases_s": {k.removeprefix("timing_s/"): round(sum(v.get(k, 0.0) for v in timed) / len(timed), 4)
                         for k in phases},
            "response_length_mean": round(sum(v["response_length/mean"] for v in timed) / len(timed), 2),
            "prompt_length_mean": round(sum(v["prompt_length/mean"] for v in timed) / len(timed), 2)}


def mfu_figures(reporter, samples: int, *, policy_dir: str, reward_dir: str | None, critic: bool, epochs: int,
                peak_gflops: float, cores: int, prompts: int) -> dict:
    """`model_gflops_per_s`, `mfu` (wall) and `mfu_cpu_time` over steps 2..N; with several samples per
    prompt also `mfu_prompt_once`: the FLOPs Keel executes, each distinct prompt counted once."""
    events = reporter.of("metrics")
    timed = [e["values"] for e in events if e["step"] >= 2] or [e["values"] for e in events]
    policy = matmul_params(policy_dir, head="lm_head")
    sizes = {"policy": policy, "critic": matmul_params(policy_dir, head="score") if critic else None,
             "reward": matmul_params(reward_dir, head="score") if reward_dir else None}
    flops = sum(iteration_flops(v, samples, epochs=epochs, **sizes) for v in timed)
    seconds = sum(v["timing_s/step"] for v in timed)
    out = {"params_matmul": sizes, "model_gflops_per_s": round(flops / seconds / 1e9, 2),
           "gemm_peak_gflops": round(peak_gflops, 1), "gemm_peak_cores": cores,
           "mfu": round(flops / seconds / (peak_gflops * 1e9), 4)}
    cpu = reporter.cpu_summary(samples).get("cpu_s")
    if cpu and len(events) >= 2:  # the CPU window is the end of step 1 to the end of step N
        cpu_flops = sum(iteration_flops(e["values"], samples, epochs=epochs, **sizes) for e in events[1:])
        out["mfu_cpu_time"] = round(cpu_flops / (cpu / cores) / (peak_gflops * 1e9), 4)
    if prompts < samples:
        executed = sum(iteration_flops(v, samples, epochs=epochs, prompts=prompts, **sizes) for v in timed)
        out["mfu_prompt_once"] = round(executed / seconds / (peak_gflops * 1e9), 4)
    return out


def step_cost(model: str, prompts: str, *, batch: int, response_length: int, prompt_length: int, epochs: int,
              dtype: str, gradient_checkpointing: bool, threads: int, seed: int, repeat: int,
              packing: bool = True) -> dict:
    """One update step's cost, phase by phase, in process (see the module docstring)."""
    import torch

    from engine.data import load_rows, tokenize_prompts
    from engine.models import load_tokenizer
    from engine.roles.actor import ActorRollout
    from engine.roles.critic import Critic
    from engine.rollout.sampling import row_seed

    cfg = build_request(model, model, prompts, "/nonexistent", batch=batch, response_length=response_length,
                        prompt_length=prompt_length, steps=repeat + 1, epochs=epochs, dtype=dtype,
                        gradient_checkpointing=gradient_checkpointing, threads=threads, seed=seed,
                        packing=packing).config
    actor = ActorRollout(cfg, model, total_steps=repeat + 1, seed=seed)
    critic = Critic(cfg, model, total_steps=repeat + 1, seed=seed)
    rows = load_rows(prompts, "prompts")[:batch]
    prompt_ids = [p.prompt_ids for p in tokenize_prompts(rows, load_tokenizer(model), prompt_length, "left")]
    noise = torch.Generator().manual_seed(seed)
    phases = ("step", "snapshot", "gen", "old_log_prob", "values", "update_critic", "update_actor")
    times: dict[str, list[float]] = {k: [] for k in phases}
    for i in range(repeat + 1):  # iteration 0 warms up
        t: dict[str, float] = {}
        start = time.perf_counter()
        actor.snapshot()
        critic.snapshot()
        t["snapshot"] = time.perf_counter() - start
        mark = time.perf_counter()
        rollout, _ = actor.generate(prompt_ids, [row_seed(seed, i, j) for j in range(len(prompt_ids))])
        t["gen"] = time.perf_counter() - mark
        mark = time.perf_counter()
        old = actor.compute_log_prob(rollout)["log_probs"]
        t["old_log_prob"] = time.perf_counter() - mark
        mark = time.perf_counter()
        values = critic.compute_values(rollout)["values"]
        t["values"] = time.perf_counter() - mark
        mask = rollout["response_mask"]
        advantages = torch.randn(mask.shape, generator=noise) * mask
        train = dict(rollout, old_log_probs=old, ref_log_probs=torch.zeros(mask.shape), advantages=advantages,
                     returns=values + advantages, values=values)
        mark = time.perf_counter()
        critic.update_critic(train, [len(prompt_ids)])
        t["update_critic"] = time.perf_counter() - mark
        mark = time.perf_counter()
        actor.update_actor(train, [len(prompt_ids)])
        t["update_actor"] = time.perf_counter() - mark
        t["step"] = time.perf_counter() - start
        if i:
            for k in phases:
                times[k].append(t[k] * 1000.0)
    out = {f"{k}_ms": spread(v) for k, v in times.items()}
    out["snapshot_share"] = round(out["snapshot_ms"]["median"] / out["step_ms"]["median"], 5)
    out["trained_params"] = sum(p.numel() for r in (actor, critic) for p in r.model.parameters() if p.requires_grad)
    out["timing"] = f"in-process iterations 2..{repeat + 1}; ms; snapshot_share = median snapshot / median step"
    return out


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
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="CPUs for the local Ray and torch (default: the local Ray gets every usable core "
                   "and the job its default resources, `cpus_per_worker: auto` resolved for this machine)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-cost", action="store_true",
                   help="measure one update step's phases in process (snapshot share; see above)")
    p.add_argument("--repeat", type=int, default=5, help="--step-cost: timed iterations (after one warm-up)")
    p.add_argument("--no-packing", action="store_true", help="model.use_remove_padding=false (padded forwards)")
    p.add_argument("--adv-estimator", choices=("gae", "grpo"), default="gae",
                   help="grpo: no critic, group-relative advantages, KL as a loss term")
    p.add_argument("--n", type=int, default=1, help="rollout.n: samples per prompt")
    p.add_argument("--reward-function", default=None,
                   help="a rule reward (e.g. gsm8k) instead of the reward model")
    p.add_argument("--gsm8k", action="store_true",
                   help="bench.datasets' GSM8K-style prompts as --prompts (default: the demo prompts)")
    p.add_argument("--wide", action="store_true",
                   help="bench.datasets' wide Llama (28M) as policy and reward model (default: the demo Llama)")
    p.add_argument("--peak-gflops", type=float, default=None, help="GEMM peak to use (default: measure it)")
    p.add_argument("--no-mfu", action="store_true", help="skip the GEMM measurement (no mfu figures)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    if args.n < 1 or (args.adv_estimator == "grpo" and args.n < 2):
        p.error("--n must be >= 1 (>= 2 for grpo: the group is the baseline)")

    threads = set_threads(args.threads) if args.step_cost or args.threads else None
    model, reward_model, prompts = args.model, args.reward_model, args.prompts
    if not prompts and args.gsm8k:
        from bench.datasets import gsm8k_paths

        prompts = gsm8k_paths()["train"]
    if not (model and reward_model and prompts):
        assets = demo_assets()
        if args.wide:
            from bench.datasets import wide_model_path

            wide = wide_model_path(tokenizer_dir=assets["tokenizer"])
            model, reward_model = model or wide, reward_model or wide
        model, reward_model = model or assets["model"], reward_model or assets["model"]
        prompts = prompts or assets["prompts_train"]

    if args.step_cost:
        load_avg = load_average()
        result = {"bench": "ppo.step_cost", "dtype": args.dtype, "threads": threads, "batch": args.batch,
                  "packing": not args.no_packing,
                  "response_length": args.response_length, "epochs": args.epochs,
                  **step_cost(model, prompts, batch=args.batch, response_length=args.response_length,
                              prompt_length=args.prompt_length, epochs=args.epochs, dtype=args.dtype,
                              gradient_checkpointing=args.gradient_checkpointing, threads=threads,
                              seed=args.seed, repeat=args.repeat, packing=not args.no_packing),
                  "load_avg_1m": load_avg, "cpus": os.cpu_count()}
        emit(result, args.json)
        return result

    import ray

    from engine.methods.ppo import run_ppo
    from engine.runtime.distributed import worker_threads

    load_avg = load_average()
    cores = threads or usable_cores()
    # Measured before Ray starts, with every core the job may use: the machine's peak, not one worker's.
    peak = None if args.no_mfu else args.peak_gflops or gemm_peak_gflops(args.dtype, cores)
    start_private_ray(cores)
    try:
        with tempfile.TemporaryDirectory(prefix="keel-bench-ppo-") as work:
            request = build_request(model, None if args.reward_function else reward_model, prompts, work,
                                    batch=args.batch, response_length=args.response_length,
                                    prompt_length=args.prompt_length, steps=args.steps, epochs=args.epochs,
                                    dtype=args.dtype, gradient_checkpointing=args.gradient_checkpointing,
                                    threads=threads, seed=args.seed, packing=not args.no_packing,
                                    adv_estimator=args.adv_estimator, n=args.n,
                                    reward_function=args.reward_function)
            reporter = TreeCPUReporter()
            start = time.perf_counter()
            run_ppo(request, reporter)
            wall = time.perf_counter() - start
    finally:
        ray.shutdown()
    samples = args.batch * args.n
    result = {"bench": "ppo" if args.adv_estimator == "gae" else args.adv_estimator, "dtype": args.dtype,
              "threads": worker_threads(request.resources), "threads_setting": args.threads or "default",
              "batch": args.batch, "n": args.n, "adv_estimator": args.adv_estimator,
              "reward": args.reward_function or "model",
              "response_length": args.response_length, "steps": args.steps, "epochs": args.epochs,
              "gradient_checkpointing": args.gradient_checkpointing, "packing": not args.no_packing,
              **summarise(reporter, samples), **reporter.cpu_summary(samples),
              **(mfu_figures(reporter, samples, policy_dir=model,
                             reward_dir=None if args.reward_function else reward_model,
                             critic=args.adv_estimator == "gae", epochs=args.epochs, peak_gflops=peak, cores=cores,
                             prompts=args.batch)
                 if peak else {}),
              "wall_s": round(wall, 2), "timing": TIMING_NOTE, "load_avg_1m": load_avg,
              "cpus": os.cpu_count()}
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
