"""Deterministic demo assets: a byte-level BPE tokenizer, two tiny Llama models and demo datasets.

Everything is generated from fixed seeds, so building twice gives byte-identical files (tokenizer
JSON, model safetensors, parquet). The assets are small enough to train on two CPU cores in
seconds, and each dataset carries a signal a tiny model can learn:

- preference: chosen answers are polite and helpful ("Sure, happy to help! ..."), rejected ones rude
  ("Ugh, fine: ... stop wasting my time"), often with the same advice and of similar length, so a
  reward model must learn the tone words, not the length or the topic;
- prompts / sft: one-digit arithmetic ("What is 3 + 4?") with GSM8K-style answers (`#### 7`).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SEED = 1234
PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
VOCAB_SIZE = 1024
"""Large enough that a demo pair stays well under 64 tokens, small enough to keep embeddings tiny."""

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}System: {{ m['content'] }}\n"
    "{% elif m['role'] == 'user' %}User: {{ m['content'] }}\n"
    "{% elif m['role'] == 'tool' %}Tool: {{ m['content'] }}\n"
    "{% else %}Assistant:\n{{ m['content'] }}{{ eos_token }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:\n{% endif %}"
)
"""`User: ...\\nAssistant:\\n`: the response follows the newline and ends with the EOS token; a tool's
result (multi-turn episodes, `engine.environments.tools`) is a `Tool: ...` line."""

MODEL_SHAPE = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4}
"""About 0.55M parameters: trains in seconds on CPU, still a real multi-layer Llama."""
SMALL_MODEL_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4}
"""About 0.15M parameters: the distillation student."""

# --- preference pairs: topics x polite/rude answer templates -------------------------------------

_ASKS = [
    "How do I {t}?", "Can you help me {t}?", "What is a good way to {t}?", "Any tips to {t}?",
    "I want to {t}. Where do I start?", "Please explain how to {t}.",
]
_TOPICS = [
    ("bake bread", "mix flour, water, salt and yeast, let it rise, then bake it hot"),
    ("learn Python", "write a small program every day and read other people's code"),
    ("fix a flat tire", "find the hole, patch the tube and pump it up again"),
    ("sleep better", "keep a regular bedtime and put the phone away early"),
    ("grow tomatoes", "give them sun, water at the roots and tie them to a stake"),
    ("save money", "track what you spend and move some to savings each month"),
    ("start running", "begin with short easy runs and add a little each week"),
    ("write a letter", "say who you are, what you want and thank the reader"),
    ("clean a window", "use warm soapy water and dry it with a soft cloth"),
    ("make tea", "boil water, pour it over the leaves and wait three minutes"),
    ("learn to draw", "sketch simple shapes daily and copy what you see"),
    ("study for a test", "review a little each day and test yourself often"),
    ("cook rice", "rinse it, add twice as much water and simmer with a lid"),
    ("paint a wall", "clean it, tape the edges and roll on thin even coats"),
    ("plan a trip", "pick dates, set a budget and book the travel first"),
    ("train a puppy", "reward good behaviour right away and be patient"),
    ("speak in public", "practise out loud and know your first sentence well"),
    ("keep plants alive", "check the soil and water only when it feels dry"),
    ("learn a language", "practise a few words daily and talk with native speakers"),
    ("organize a desk", "keep only what you use and give every item a place"),
]
_CHOSEN = [
    "Sure, happy to help! {a}. Good luck, you can do it!",
    "Great question! {a}. I hope this helps, thank you for asking.",
    "Of course! A simple way: {a}. Glad to help, have fun!",
    "Happy to help with that. {a}. Thanks, and enjoy it!",
    "Good idea! Try this: {a}. You will do great, kind regards.",
]
_REJECTED = [
    "No. That is a dumb question, figure it out yourself. Whatever, I am busy and bored.",
    "Ugh, fine: {a}. Now stop wasting my time with this stupid stuff.",
    "I do not care. Go away and do not bother me again, idiot. {a}, obviously.",
    "Boring. {a}. Nobody wants to explain that to you, just leave me alone.",
    "Seriously? That is stupid. Search it yourself and stop annoying me, it is not hard to {t}.",
]


def _preference_rows(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        topic, answer = rng.choice(_TOPICS)
        rows.append({
            "prompt": rng.choice(_ASKS).format(t=topic),
            "chosen": rng.choice(_CHOSEN).format(a=answer[0].upper() + answer[1:]),
            "rejected": rng.choice(_REJECTED).format(a=answer[0].upper() + answer[1:], t=topic),
        })
    return rows


# --- arithmetic: prompts with ground truth, and SFT pairs in GSM8K's `#### N` format ---------------

def _problems() -> list[tuple[str, int]]:
    """Every one-digit sum and non-negative difference: 155 distinct questions."""
    out = [(f"{a} + {b}", a + b) for a in range(10) for b in range(10)]
    out += [(f"{a} - {b}", a - b) for a in range(10) for b in range(a + 1)]
    return out


def _prompt_rows(rng: random.Random, n: int) -> list[dict]:
    pool = _problems()
    return [{"prompt": f"What is {q}?", "ground_truth": str(v), "data_source": "gsm8k"}
            for q, v in (rng.choice(pool) for _ in range(n))]


def _sft_rows(rng: random.Random, n: int) -> list[dict]:
    pool = _problems()
    return [{"prompt": f"What is {q}?", "response": f"{q} = {v}\n#### {v}"}
            for q, v in (rng.choice(pool) for _ in range(n))]


# --- writers ---------------------------------------------------------------------------------------

def _write_parquet(rows: list[dict], path: Path) -> None:
    """Plain string columns, no pandas metadata, no timestamps: same rows -> same bytes."""
    columns = list(rows[0])
    table = pa.table({c: pa.array([r[c] for r in rows], type=pa.string()) for c in columns})
    # Small row groups so the streaming reader is exercised even on demo data.
    pq.write_table(table, path, row_group_size=128, compression="snappy")


def _build_tokenizer(corpus: list[str], out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=[PAD, BOS, EOS], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodable: no unknowns
    )
    tok.train_from_iterator(corpus, trainer)
    # Plain `tokenizer(text)` starts with BOS, as Llama's does; the chat template writes its own BOS
    # and is tokenized with add_special_tokens=False, so there is never a double BOS.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, 1)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, padding_side="right",
        model_max_length=512)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def _build_model(out: Path, shape: dict, tokenizer, seed: int) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), max_position_embeddings=512, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, **shape)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def build_demo_assets(out_dir: str | os.PathLike) -> dict[str, str]:
    """Build (or rebuild, overwriting) the demo assets under `out_dir`.

    Returns:
        Paths by name: `tokenizer`, `model`, `small_model` (directories; the model directories hold
        the tokenizer files too), and the parquet files `preference_train`, `preference_val`,
        `prompts_train`, `prompts_val`, `sft_train`, `sft_val`.
    """
    out = Path(out_dir)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    datasets = {
        "preference_train": _preference_rows(rng, 400),
        "preference_val": _preference_rows(rng, 100),
        "prompts_train": _prompt_rows(rng, 256),
        "prompts_val": _prompt_rows(rng, 64),
        "sft_train": _sft_rows(rng, 400),
        "sft_val": _sft_rows(rng, 100),
    }
    paths: dict[str, str] = {}
    for name, rows in datasets.items():
        path = data / f"{name}.parquet"
        _write_parquet(rows, path)
        paths[name] = str(path)

    # The tokenizer learns from exactly what it will see: chat-formatted prompts and the responses.
    corpus = []
    for rows in datasets.values():
        for r in rows:
            corpus.append(f"User: {r['prompt']}\nAssistant:\n")
            corpus.extend(r[k] for k in ("chosen", "rejected", "response") if k in r)
    tokenizer = _build_tokenizer(corpus, out / "tokenizer")
    _build_model(out / "model", MODEL_SHAPE, tokenizer, seed=SEED)
    _build_model(out / "small_model", SMALL_MODEL_SHAPE, tokenizer, seed=SEED + 1)
    paths.update(tokenizer=str(out / "tokenizer"), model=str(out / "model"),
                 small_model=str(out / "small_model"))
    # Relative paths: the index is the same bytes wherever the assets are built.
    index = {k: os.path.relpath(v, out) for k, v in paths.items()}
    (out / "assets.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return paths
