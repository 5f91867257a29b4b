"""The Hugging Face TRL side of `bench.compare_trl`: runs one workload with TRL and prints one JSON line.

Runs in TRL's own virtual environment (`.bench-venv`, made by `bench.compare_trl`), never in Keel's:
it imports neither `engine` nor `bench`. Its inputs are already tokenized by Keel's code, so both
sides train on the same token ids.

    .bench-venv/bin/python bench/trl_runner.py rm --model DIR --data TOKENIZED.parquet
        --batch-size 16 --steps 100 [--dtype float32|bfloat16] [--gradient-checkpointing] [--threads N]
    .bench-venv/bin/python bench/trl_runner.py ppo --model DIR --reward-model DIR --prompts TOKENIZED.parquet
        --batch 16 --response-length 32 --steps 5 [--dtype ...] [--gradient-checkpointing] [--threads N]

Timing matches Keel's (steps 2..N, loading and the first step excluded): the gaps between
consecutive `on_step_end` callbacks, i.e. the trainer's whole step including its data loading
and bookkeeping, as Keel's `timing_s/step` covers its whole step.

Precision: `--dtype` loads the weights in that dtype, as Keel does, and bfloat16 also turns on
TRL's `bf16` autocast; `--gradient-checkpointing` sets TRL's `gradient_checkpointing`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time

# Run as a script, this file's folder leads sys.path, and `bench/datasets.py` would shadow the
# `datasets` package TRL needs: drop it.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def _clock_callback():
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        """Wall and CPU time at the end of every optimizer step (PPO: every iteration)."""

        def __init__(self) -> None:
            self.wall: list[float] = []
            self.cpu: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.wall.append(time.perf_counter())
            self.cpu.append(time.process_time())

    return StepClock()


def _gaps(stamps: list[float]) -> list[float]:
    """Durations of steps 2..N from end-of-step stamps of steps 1..N."""
    return [b - a for a, b in itertools.pairwise(stamps)]


def _common_args(args, out: str) -> dict:
    return {"output_dir": out, "report_to": "none", "save_strategy": "no", "logging_steps": 10**6,
            "use_cpu": True, "seed": args.seed, "bf16": args.dtype == "bfloat16",
            "gradient_checkpointing": args.gradient_checkpointing, "dataloader_num_workers": 0,
            "disable_tqdm": True}


def run_rm(args) -> dict:
    import pyarrow.parquet as pq
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    rows = pq.read_table(args.data).to_pylist()
    dataset = Dataset.from_list([{"chosen_ids": r["chosen_ids"], "rejected_ids": r["rejected_ids"]} for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    torch.manual_seed(args.seed)
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model, num_labels=1, dtype=getattr(torch, args.dtype))
    model.config.pad_token_id = tokenizer.pad_token_id
    clock = _clock_callback()
    with tempfile.TemporaryDirectory(prefix="trl-bench-rm-") as out:
        config = RewardConfig(**_common_args(args, out), per_device_train_batch_size=args.batch_size,
                              gradient_accumulation_steps=1, max_steps=args.steps, learning_rate=args.lr,
                              lr_scheduler_type="constant", max_length=None, center_rewards_coefficient=None,
                              dataloader_drop_last=True)
        trainer = RewardTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                                callbacks=[clock])
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    gaps, cpu_gaps = _gaps(clock.wall), _gaps(clock.cpu)
    # Real and computed tokens of the batches the trainer drew (one pass over its sampler order is
    # not recoverable cheaply; the padding figure below is the expectation over random batches).
    lengths = [(len(r["chosen_ids"]), len(r["rejected_ids"])) for r in rows]
    return {"pairs_per_s": round(args.batch_size * len(gaps) / sum(gaps), 2),
            "pairs_per_cpu_s": round(args.batch_size * len(cpu_gaps) / sum(cpu_gaps), 2),
            "tokens_per_s": round(sum(a + b for a, b in lengths) / len(lengths) * args.batch_size
                                  * len(gaps) / sum(gaps), 1),
            "padding_efficiency": round(_expected_padding(lengths, args.batch_size, args.seed), 4),
            "timed_steps": len(gaps), "timed_s": round(sum(gaps), 3), "wall_s": round(wall, 2)}


def _expected_padding(lengths: list[tuple[int, int]], batch: int, seed: int, draws: int = 200) -> float:
    """Real / computed tokens when `batch` random pairs are padded together to their longest sequence
    (what TRL's `DataCollatorForPreference` does), averaged over random batches."""
    import random

    rng = random.Random(seed)
    real = computed = 0
    for _ in range(draws):
        pick = rng.sample(lengths, min(batch, len(lengths)))
        real += sum(a + b for a, b in pick)
        computed += 2 * len(pick) * max(max(a, b) for a, b in pick)
    return real / computed


def run_ppo(args) -> dict:
    import pyarrow.parquet as pq
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
    from trl.experimental.ppo import PPOConfig, PPOTrainer
    from trl.experimental.ppo import ppo_trainer as ppo_module

    rows = pq.read_table(args.prompts).to_pylist()
    dataset = Dataset.from_list([{"input_ids": r["prompt_ids"]} for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"  # TRL's PPO generates from left-padded queries
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(args.seed)
    policy = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    ref = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    value = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=1, dtype=dtype)
    reward = AutoModelForSequenceClassification.from_pretrained(args.reward_model, num_labels=1, dtype=dtype)
    for m in (value, reward):
        m.config.pad_token_id = tokenizer.pad_token_id

    # Count and time generation where TRL does it, without changing what it does.
    generated: list[int] = []
    gen_time: list[float] = []
    original = ppo_module.batch_generation
    eos = tokenizer.eos_token_id

    def counted(model, queries, *rest, **kw):
        start = time.perf_counter()
        query_responses, logits = original(model, queries, *rest, **kw)
        gen_time.append(time.perf_counter() - start)
        responses = query_responses[:, queries.shape[1]:]
        is_eos = responses == eos
        first = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, torch.full_like(is_eos[:, 0], responses.shape[1],
                                                                                         dtype=torch.long))
        generated.append(int(first.sum()))
        return query_responses, logits

    ppo_module.batch_generation = counted
    clock = _clock_callback()
    with tempfile.TemporaryDirectory(prefix="trl-bench-ppo-") as out:
        config = PPOConfig(**_common_args(args, out), per_device_train_batch_size=args.batch,
                           gradient_accumulation_steps=1, num_mini_batches=1, num_ppo_epochs=args.epochs,
                           local_rollout_forward_batch_size=args.batch, response_length=args.response_length,
                           total_episodes=args.batch * args.steps, stop_token="eos", temperature=1.0,
                           num_sample_generations=0, learning_rate=args.lr, missing_eos_penalty=None)
        trainer = PPOTrainer(args=config, processing_class=tokenizer, model=policy, ref_model=ref,
                             reward_model=reward, value_model=value, train_dataset=dataset, callbacks=[clock])
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    gaps = _gaps(clock.wall)
    tokens = sum(generated[1:len(gaps) + 1])
    return {"tokens_per_s": round(tokens / sum(gaps), 2), "timed_steps": len(gaps), "timed_s": round(sum(gaps), 3),
            "generated_tokens": tokens, "timing_s/gen": round(sum(gen_time[1:]) / max(len(gen_time) - 1, 1), 3),
            "timing_s/step": round(sum(gaps) / len(gaps), 3), "wall_s": round(wall, 2)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", choices=("rm", "ppo"))
    p.add_argument("--model", required=True)
    p.add_argument("--data", help="rm: parquet with chosen_ids / rejected_ids")
    p.add_argument("--reward-model", help="ppo: reward model directory")
    p.add_argument("--prompts", help="ppo: parquet with prompt_ids")
    p.add_argument("--batch-size", "--batch", dest="batch", type=int, default=16)
    p.add_argument("--response-length", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1, help="ppo: PPO epochs per batch")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    args.batch_size = args.batch
    import torch
    import transformers
    import trl

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.lr is None:
        args.lr = 1e-4 if args.workload == "rm" else 1e-6
    result = {"bench": f"trl_{args.workload}", "trl": trl.__version__, "transformers": transformers.__version__,
              "torch": torch.__version__, "threads": torch.get_num_threads(), "dtype": args.dtype,
              "gradient_checkpointing": args.gradient_checkpointing}
    result.update(run_rm(args) if args.workload == "rm" else run_ppo(args))
    print(json.dumps(result) if args.json else result, flush=True)
    return result


if __name__ == "__main__":
    main()
