"""engine.demo: the demo assets are complete, loadable, learnable-looking and byte-for-byte reproducible."""

from __future__ import annotations

import json
import re
from pathlib import Path

from engine.config import ModelConfig
from engine.data import load_rows, tokenize_preference, tokenize_prompts, tokenize_sft
from engine.demo import build_demo_assets
from engine.models import count_parameters, load_policy, load_tokenizer

KINDS = {"preference_train": "preference", "preference_val": "preference", "prompts_train": "prompts",
         "prompts_val": "prompts", "sft_train": "sft", "sft_val": "sft"}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_building_twice_gives_identical_files(demo_assets, tmp_path):
    first_root = Path(demo_assets["model"]).parent
    second = build_demo_assets(tmp_path / "again")
    assert second.keys() == demo_assets.keys()
    a, b = _files(first_root), _files(tmp_path / "again")
    assert a.keys() == b.keys()
    assert {"model/model.safetensors", "small_model/model.safetensors", "tokenizer/tokenizer.json",
            "data/preference_train.parquet"} <= a.keys()
    assert [name for name in a if a[name] != b[name]] == []
    assert json.loads(a["assets.json"])["model"] == "model"


def test_assets_load_and_fit(demo_assets):
    tok = load_tokenizer(demo_assets["tokenizer"])
    assert tok.chat_template and tok.pad_token_id != tok.eos_token_id and len(tok) <= 1024
    rows = {name: load_rows(demo_assets[name], kind) for name, kind in KINDS.items()}
    assert [len(rows[n]) for n in KINDS] == [400, 100, 256, 64, 400, 100]
    pairs = tokenize_preference(rows["preference_train"], tok, 64, "error")  # all under 64 tokens
    assert all(p.chosen_ids != p.rejected_ids for p in pairs)
    for e in tokenize_sft(rows["sft_train"], tok, 32, 32, "error"):
        m = re.fullmatch(r"(\d) ([+-]) (\d) = (\d+)\n#### (\d+)<\|eos\|>", tok.decode(e.input_ids[e.prompt_len:]))
        a, op, b, result, answer = m.groups()
        assert int(result) == int(answer) == (int(a) + int(b) if op == "+" else int(a) - int(b))
    prompts = tokenize_prompts(rows["prompts_val"], tok, 32, "error")
    assert all(p.ground_truth.isdigit() and p.data_source == "gsm8k" for p in prompts)
    for name in ("model", "small_model"):
        assert load_tokenizer(demo_assets[name]).get_vocab() == tok.get_vocab()
        model = load_policy(demo_assets[name], ModelConfig(), trainable=False)
        assert model.config.vocab_size == len(tok) and model.config.pad_token_id == tok.pad_token_id
    assert count_parameters(demo_assets["small_model"]) < count_parameters(demo_assets["model"]) < 2_000_000


def test_preference_signal_is_lexical_not_length(demo_assets):
    rows = load_rows(demo_assets["preference_train"], "preference")
    polite = ("help", "thank", "luck", "glad", "great", "good")
    rude = ("dumb", "stupid", "idiot", "boring", "annoying", "go away", "care", "wasting")
    assert all(any(w in r["chosen"].lower() for w in polite) for r in rows)
    assert not any(any(w in r["chosen"].lower() for w in rude) for r in rows)
    assert all(any(w in r["rejected"].lower() for w in rude) for r in rows)
    longer = sum(len(r["chosen"]) > len(r["rejected"]) for r in rows) / len(rows)
    assert 0.2 < longer < 0.95  # length alone does not separate chosen from rejected
