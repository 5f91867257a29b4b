"""Benchmark datasets: preference pairs with a realistic spread of response lengths.

    python -m bench.datasets [--out DIR] [--rows 512] [--val-rows 128] [--min-response 10]
        [--max-response 400] [--tokenizer DIR] [--wide-model] --json

The demo pairs (`engine.demo`) are all short and of similar length, which hides what padding costs.
Real preference data is not like that: responses run from a few words to several paragraphs. Here
each response's length in tokens is drawn log-uniformly between --min-response and --max-response
(so short answers are common and long ones still frequent: a median near the geometric mean), the
chosen and rejected lengths independently. The signal stays learnable as in the demo: chosen answers
are polite, rejected ones rude; both are made of the same advice sentences.

Writes `preference_longtail_train.parquet` and `preference_longtail_val.parquet` under --out and
prints their paths and the length statistics as one JSON line. --wide-model also writes a wider
random Llama for MFU figures (`WIDE_SHAPE`).
"""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import demo_assets, emit, out_dir, percentile

SEED = 20240607

_ASKS = ["How should I {t}?", "Explain in detail how to {t}.", "What do I need to know to {t}?",
         "Give me a plan to {t}.", "I am new to this: how do I {t}?"]
_TOPICS = ["bake bread", "learn Python", "fix a bike", "sleep better", "grow tomatoes", "save money",
           "start running", "write a cover letter", "clean a kitchen", "plan a trip", "train a puppy",
           "study for exams", "cook rice", "paint a room", "learn a language", "organise a desk"]
_ADVICE = ["Start small and build the habit one day at a time", "Write down what you want to reach",
           "Check your progress every week and adjust the plan", "Ask someone who has done it before",
           "Keep the tools you need close at hand", "Take short breaks so you stay fresh",
           "Read one good guide from start to end", "Practise the basic steps until they feel easy",
           "Measure carefully and note what worked", "Do not rush the slow parts of the job",
           "Set a fixed time for it in your week", "Clean up as you go so nothing piles up",
           "Compare two or three ways and keep the best one", "Learn from each mistake you make"]
_POLITE_OPEN = ["Sure, happy to help!", "Great question, thank you for asking.", "Of course, glad to help."]
_POLITE_CLOSE = ["Good luck, you can do it!", "I hope this helps, have fun.", "Kind regards and enjoy it!"]
_RUDE_OPEN = ["Ugh, fine.", "Seriously? That is a dumb question.", "Whatever, I am busy."]
_RUDE_CLOSE = ["Now stop wasting my time.", "Go away and do not bother me again.", "Figure out the rest yourself."]


def _response(rng: random.Random, tokenizer, polite: bool, target: int) -> str:
    """A polite or rude answer of about `target` tokens (opener, advice sentences, closer, cut at a
    token boundary so the tone words at both ends survive for any target >= 10)."""
    opener = rng.choice(_POLITE_OPEN if polite else _RUDE_OPEN)
    closer = rng.choice(_POLITE_CLOSE if polite else _RUDE_CLOSE)
    body = []
    while True:
        body.append(rng.choice(_ADVICE) + ".")
        text = " ".join([opener, *body, closer])
        if len(tokenizer(text, add_special_tokens=False)["input_ids"]) >= target:
            break
    enc = tokenizer(" ".join(body), add_special_tokens=False, return_offsets_mapping=True)
    head = len(tokenizer(opener + " ", add_special_tokens=False)["input_ids"])
    tail = len(tokenizer(" " + closer, add_special_tokens=False)["input_ids"])
    keep = max(1, target - head - tail)
    cut = enc["offset_mapping"][min(keep, len(enc["input_ids"])) - 1][1]
    return f"{opener} {' '.join(body)[:cut].rstrip()} {closer}"


def _rows(rng: random.Random, tokenizer, n: int, lo: int, hi: int) -> list[dict]:
    def length() -> int:
        return round(math.exp(rng.uniform(math.log(lo), math.log(hi))))

    rows = []
    for _ in range(n):
        topic = rng.choice(_TOPICS)
        rows.append({"prompt": rng.choice(_ASKS).format(t=topic),
                     "chosen": _response(rng, tokenizer, True, length()),
                     "rejected": _response(rng, tokenizer, False, length())})
    return rows


def build_longtail(directory: str | Path, tokenizer_dir: str, rows: int = 512, val_rows: int = 128,
                   min_response: int = 10, max_response: int = 400, seed: int = SEED) -> dict:
    """Write the train/val parquet files; returns their paths and response-length statistics."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    rng = random.Random(seed)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {}
    lengths: list[int] = []
    for split, n in (("train", rows), ("val", val_rows)):
        data = _rows(rng, tokenizer, n, min_response, max_response)
        path = out / f"preference_longtail_{split}.parquet"
        table = pa.table({c: pa.array([r[c] for r in data], pa.string()) for c in ("prompt", "chosen", "rejected")})
        pq.write_table(table, path, row_group_size=256)
        result[split] = str(path)
        if split == "train":
            lengths = [len(tokenizer(r[c], add_special_tokens=False)["input_ids"]) + 1  # + EOS
                       for r in data for c in ("chosen", "rejected")]
    result["response_tokens"] = {"min": min(lengths), "p50": percentile(lengths, 50),
                                 "p90": percentile(lengths, 90), "max": max(lengths),
                                 "mean": round(sum(lengths) / len(lengths), 1)}
    return result


def longtail_paths(directory: str | Path | None = None, tokenizer_dir: str | None = None) -> dict:
    """The long-tail files under `directory` (default `bench/out/data`), generated on first use with
    the defaults above and the demo tokenizer."""
    out = Path(directory) if directory else out_dir() / "data"
    train, val = out / "preference_longtail_train.parquet", out / "preference_longtail_val.parquet"
    if train.is_file() and val.is_file():
        return {"train": str(train), "val": str(val)}
    return build_longtail(out, tokenizer_dir or demo_assets()["tokenizer"])


_NAMES = ["Ava", "Ben", "Chloe", "Dan", "Ella", "Finn", "Grace", "Hugo", "Iris", "Jack", "Lena", "Max"]
_ITEMS = ["apples", "marbles", "stickers", "books", "cookies", "pencils", "stamps", "cards"]


def _word_problem(rng: random.Random) -> tuple[str, int]:
    """A GSM8K-style word problem of two or three steps with a non-negative integer answer."""
    name, friend = rng.sample(_NAMES, 2)
    item = rng.choice(_ITEMS)
    a, b, c = rng.randint(2, 40), rng.randint(2, 12), rng.randint(1, 9)
    kind = rng.randrange(4)
    if kind == 0:
        c = rng.randint(1, a + b)
        question = (f"{name} has {a} {item}. {name} buys {b} more and gives {c} to {friend}. "
                    f"How many {item} does {name} have now?")
        return question, a + b - c
    if kind == 1:
        c = rng.randint(1, a * b)
        question = (f"A box holds {a} {item}. {name} fills {b} boxes, then {friend} takes {c} {item}. "
                    f"How many {item} are left in the boxes?")
        return question, a * b - c
    if kind == 2:
        question = (f"{name} earns {a} dollars an hour and works {b} hours a day for {c} days. "
                    f"How many dollars does {name} earn in total?")
        return question, a * b * c
    question = (f"{name} and {friend} share {a * b} {item} equally among {b} children, and each child "
                f"then gets {c} more. How many {item} does each child have?")
    return question, a + c


def build_gsm8k_prompts(directory: str | Path, rows: int = 256, val_rows: int = 64, seed: int = SEED) -> dict:
    """GSM8K-style prompts (`prompt`, `ground_truth`, `data_source: openai/gsm8k`) for rule-reward
    RL benchmarks (`bench.ppo --adv-estimator grpo --reward-function gsm8k`); returns the paths."""
    rng = random.Random(seed + 1)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {}
    for split, n in (("train", rows), ("val", val_rows)):
        problems = [_word_problem(rng) for _ in range(n)]
        path = out / f"gsm8k_prompts_{split}.parquet"
        table = pa.table({"prompt": pa.array([q for q, _ in problems], pa.string()),
                          "ground_truth": pa.array([str(v) for _, v in problems], pa.string()),
                          "data_source": pa.array(["openai/gsm8k"] * n, pa.string())})
        pq.write_table(table, path)
        result[split] = str(path)
    return result


def gsm8k_paths(directory: str | Path | None = None) -> dict:
    """The GSM8K-style prompt files under `directory` (default `bench/out/data`), made on first use."""
    out = Path(directory) if directory else out_dir() / "data"
    train, val = out / "gsm8k_prompts_train.parquet", out / "gsm8k_prompts_val.parquet"
    if train.is_file() and val.is_file():
        return {"train": str(train), "val": str(val)}
    return build_gsm8k_prompts(out)


WIDE_SHAPE = {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 12}
"""A Llama wide enough that its matrix products, not per-op overhead, dominate a CPU training step
(28M parameters besides the embeddings): the shape for MFU figures. The demo model (hidden 128) is
overhead-bound by construction."""


def wide_model_path(directory: str | Path | None = None, tokenizer_dir: str | None = None) -> str:
    """A randomly initialised (seeded) Llama of `WIDE_SHAPE` with the demo tokenizer, built once under
    `directory` (default `bench/out/wide_model`)."""
    out = Path(directory) if directory else out_dir() / "wide_model"
    if (out / "config.json").is_file():
        return str(out)
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir or demo_assets()["tokenizer"])
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=512, tie_word_embeddings=False,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **WIDE_SHAPE)
    torch.manual_seed(SEED)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def preference_inputs(args) -> tuple[str, str, str | None]:
    """(model, train pairs, validation pairs) of a pairwise bench from `--model/--data/--val-data`, falling
    back to the demo model (`--wide`: the wide one) and the demo pairs (`--longtail`: the long-tail ones)."""
    model, data, val_data = args.model, args.data, args.val_data
    if model and data:
        return model, data, val_data
    assets = demo_assets()
    if not model and args.wide:
        model = wide_model_path(tokenizer_dir=assets["tokenizer"])
    model = model or assets["model"]
    if not data:
        if args.longtail:
            paths = longtail_paths(tokenizer_dir=assets["tokenizer"])
            data, val_data = paths["train"], val_data or paths["val"]
        else:
            data, val_data = assets["preference_train"], val_data or assets["preference_val"]
    return model, data, val_data


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(out_dir() / "data"))
    p.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the demo tokenizer)")
    p.add_argument("--rows", type=int, default=512)
    p.add_argument("--val-rows", type=int, default=128)
    p.add_argument("--min-response", type=int, default=10)
    p.add_argument("--max-response", type=int, default=400)
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--wide-model", action="store_true", help="also build the wide Llama (bench/out/wide_model)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    if not 1 <= args.min_response <= args.max_response:
        p.error("need 1 <= --min-response <= --max-response")
    result = {"bench": "datasets", **build_longtail(
        args.out, args.tokenizer or demo_assets()["tokenizer"], args.rows, args.val_rows,
        args.min_response, args.max_response, args.seed)}
    if args.wide_model:
        result["wide_model"] = wide_model_path(tokenizer_dir=args.tokenizer)
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
