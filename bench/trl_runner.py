"""The Hugging Face TRL side of `bench.compare_trl`: runs one workload with TRL and prints one JSON line.

Runs in TRL's own virtual environment (`.bench-venv`, made by `bench.compare_trl`), never in Keel's:
it imports neither `engine` nor `bench`. Its inputs are already tokenized by Keel's code, so both
sides train on the same token ids.

    .bench-venv/bin/python bench/trl_runner.py rm --model DIR --data TOKENIZED.parquet
        --batch-size 16 --steps 100 [--dtype float32|bfloat16] [--gradient-checkpointing] [--threads N]
    .bench-venv/bin/python bench/trl_runner.py ppo --model DIR --reward-model DIR --prompts TOKENIZED.parquet
        --batch 16 --response-length 32 --steps 5 [--dtype ...] [--gradient-checkpointing] [--threads N]
    .bench-venv/bin/python bench/trl_runner.py grpo --model DIR --prompts PROMPTS.parquet --batch 16 --n 4
        --response-length 32 --steps 5 [--beta 0.04] [...]
    .bench-venv/bin/python bench/trl_runner.py dpo --model DIR --data TOKENIZED.parquet --batch-size 16
        --steps 40 [--beta 0.1] [...]

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
import re
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
    return _generation_figures(clock, generated, gen_time, wall)


def _generation_figures(clock, generated: list[int], gen_time: list[float], wall: float) -> dict:
    """Generated tokens per second (wall and CPU) over the steps after the first, as PPO and GRPO report them."""
    gaps, cpu_gaps = _gaps(clock.wall), _gaps(clock.cpu)
    tokens = sum(generated[1:len(gaps) + 1])
    return {"tokens_per_s": round(tokens / sum(gaps), 2), "tokens_per_cpu_s": round(tokens / sum(cpu_gaps), 2),
            "timed_steps": len(gaps), "timed_s": round(sum(gaps), 3),
            "generated_tokens": tokens, "timing_s/gen": round(sum(gen_time[1:]) / max(len(gen_time) - 1, 1), 3),
            "timing_s/step": round(sum(gaps) / len(gaps), 3), "wall_s": round(wall, 2)}


# --- GRPO ---------------------------------------------------------------------------------------

_GSM8K_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


def gsm8k_reward(completions, ground_truth, **_) -> list[float]:
    """Keel's `gsm8k` rule (VERL's strict GSM8K scorer), written again here (this file imports no
    Keel code): the last `#### <number>` in the final 300 characters, `,` removed, equal to the
    ground truth as a string -> 1.0, else 0.0."""
    scores = []
    for completion, truth in zip(completions, ground_truth):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        found = _GSM8K_ANSWER.findall(text[-300:])
        answer = found[-1].replace(",", "").replace("$", "") if found else None
        scores.append(1.0 if answer is not None and answer == truth else 0.0)
    return scores


def grpo_dataset(rows: list[dict]) -> list[dict]:
    """TRL's conversational prompts (it applies the chat template, as Keel does for a plain-text prompt)."""
    return [{"prompt": [{"role": "user", "content": r["prompt"]}], "ground_truth": r["ground_truth"]} for r in rows]


def grpo_config_kwargs(args, out: str) -> dict:
    """Keel's GRPO job, in TRL's names: `batch` prompts x `n` samples per step, all in one optimizer
    step (one mini-batch, one epoch: `num_iterations=1`), temperature 1 without top-k/top-p, the KL
    to the reference as a k3 loss term with Keel's coefficient, token-mean loss (`dapo`), advantages
    scaled by the group's std."""
    return {**_common_args(args, out), "per_device_train_batch_size": args.batch * args.n,
            "gradient_accumulation_steps": 1, "num_generations": args.n,
            "max_completion_length": args.response_length, "max_steps": args.steps,
            "learning_rate": args.lr, "lr_scheduler_type": "constant", "temperature": 1.0, "top_k": 0,
            "top_p": 1.0, "beta": args.beta, "num_iterations": 1, "loss_type": "dapo", "scale_rewards": "group",
            "model_init_kwargs": {"dtype": args.dtype}}


def run_grpo(args) -> dict:
    import pyarrow.parquet as pq
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rows = pq.read_table(args.prompts).to_pylist()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"
    # Both sides must sample from the same prompt tokens: compare TRL's rendering with Keel's ids.
    mine = [tokenizer.apply_chat_template(p["prompt"], add_generation_prompt=True, tokenize=True,
                                          return_dict=True)["input_ids"] for p in grpo_dataset(rows[:32])]
    same_prompts = all(list(a) == list(r["prompt_ids"]) for a, r in zip(mine, rows[:32]))
    torch.manual_seed(args.seed)

    generated: list[int] = []
    gen_time: list[float] = []

    class CountingGRPOTrainer(GRPOTrainer):
        """Counts generated tokens (up to and including EOS, as TRL's own mask does) and times generation."""

        def _generate_single_turn(self, *a, **kw):
            start = time.perf_counter()
            completion_ids, logprobs = super()._generate_single_turn(*a, **kw)
            gen_time.append(time.perf_counter() - start)
            generated.append(sum(len(c) for c in completion_ids))
            return completion_ids, logprobs

    clock = _clock_callback()
    with tempfile.TemporaryDirectory(prefix="trl-bench-grpo-") as out:
        config = GRPOConfig(**grpo_config_kwargs(args, out))
        trainer = CountingGRPOTrainer(model=args.model, reward_funcs=gsm8k_reward, args=config,
                                      train_dataset=Dataset.from_list(grpo_dataset(rows)),
                                      processing_class=tokenizer, callbacks=[clock])
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    return {**_generation_figures(clock, generated, gen_time, wall), "cpu_s": round(sum(_gaps(clock.cpu)), 3),
            "prompt_ids_match": same_prompts}


# --- DPO ----------------------------------------------------------------------------------------

def dpo_rows(table_rows: list[dict]) -> list[dict]:
    """Keel's tokenized pairs as TRL's processed DPO columns (`prompt_ids`, `chosen_ids`,
    `rejected_ids`: the completions after the prompt, EOS included)."""
    return [{"prompt_ids": r["prompt_ids"], "chosen_ids": r["chosen_ids"], "rejected_ids": r["rejected_ids"]}
            for r in table_rows]


def dpo_config_kwargs(args, out: str) -> dict:
    """Keel's DPO job in TRL's names (sigmoid loss, `beta`); TRL's default reference handling: the
    frozen reference runs inside every step (`precompute_ref_log_probs=False`)."""
    return {**_common_args(args, out), "per_device_train_batch_size": args.batch, "gradient_accumulation_steps": 1,
            "max_steps": args.steps, "learning_rate": args.lr, "lr_scheduler_type": "constant",
            "max_length": None, "beta": args.beta, "loss_type": ["sigmoid"], "dataloader_drop_last": True,
            "precompute_ref_log_probs": False}


def run_dpo(args) -> dict:
    import pyarrow.parquet as pq
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    rows = dpo_rows(pq.read_table(args.data).to_pylist())
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    ref = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)

    class PretokenizedDPOTrainer(DPOTrainer):
        """The rows are already TRL's processed columns (Keel's token ids): no second tokenization."""

        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            return dataset

    clock = _clock_callback()
    with tempfile.TemporaryDirectory(prefix="trl-bench-dpo-") as out:
        config = DPOConfig(**dpo_config_kwargs(args, out))
        trainer = PretokenizedDPOTrainer(model=model, ref_model=ref, args=config, train_dataset=Dataset.from_list(rows),
                                         processing_class=tokenizer, callbacks=[clock])
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    gaps, cpu_gaps = _gaps(clock.wall), _gaps(clock.cpu)
    lengths = [(len(r["prompt_ids"]) + len(r["chosen_ids"]), len(r["prompt_ids"]) + len(r["rejected_ids"]))
               for r in rows]
    return {"pairs_per_s": round(args.batch * len(gaps) / sum(gaps), 2),
            "pairs_per_cpu_s": round(args.batch * len(cpu_gaps) / sum(cpu_gaps), 2),
            "padding_efficiency": round(_expected_padding(lengths, args.batch, args.seed), 4),
            "timed_steps": len(gaps), "timed_s": round(sum(gaps), 3), "wall_s": round(wall, 2)}


DEFAULTS = {"rm": (1e-4, None), "ppo": (1e-6, None), "grpo": (1e-6, 0.04), "dpo": (1e-5, 0.1)}
"""Per workload, (learning rate, beta) when not given: Keel's benchmark settings (`bench.reward_model`,
`bench.ppo`, `bench.ppo --adv-estimator grpo` (`GRPO_KL_COEF`), `bench.dpo`)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with the workload's defaults filled in (imports neither torch nor TRL)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", choices=("rm", "ppo", "grpo", "dpo"))
    p.add_argument("--model", required=True)
    p.add_argument("--data", help="rm: parquet with chosen_ids / rejected_ids; dpo: prompt_ids / chosen_ids / "
                                  "rejected_ids (completions after the prompt)")
    p.add_argument("--reward-model", help="ppo: reward model directory")
    p.add_argument("--prompts", help="ppo: parquet with prompt_ids; grpo: prompt / ground_truth / prompt_ids")
    p.add_argument("--n", type=int, default=4, help="grpo: samples per prompt (num_generations)")
    p.add_argument("--beta", type=float, default=None, help="grpo: KL loss coefficient (0.04); dpo: beta (0.1)")
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
    lr, beta = DEFAULTS[args.workload]
    args.lr = lr if args.lr is None else args.lr
    args.beta = beta if args.beta is None else args.beta
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import torch
    import transformers
    import trl

    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"bench": f"trl_{args.workload}", "trl": trl.__version__, "transformers": transformers.__version__,
              "torch": torch.__version__, "threads": torch.get_num_threads(), "dtype": args.dtype,
              "gradient_checkpointing": args.gradient_checkpointing}
    runners = {"rm": run_rm, "ppo": run_ppo, "grpo": run_grpo, "dpo": run_dpo}
    result.update(runners[args.workload](args))
    print(json.dumps(result) if args.json else result, flush=True)
    return result


if __name__ == "__main__":
    main()
