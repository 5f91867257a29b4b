"""engine.data: reading and checking files, tokenizing, token-budget batching, gradient accumulation."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.algos.logits import log_probs_from_logits
from engine.config import ModelConfig
from engine.data import (
    iter_rows,
    load_rows,
    pad,
    padding_efficiency,
    prompt_token_ids,
    token_budget_batches,
    tokenize_preference,
    tokenize_prompts,
    tokenize_sft,
)
from engine.errors import DataError
from engine.models import load_policy, load_tokenizer

PREF = [{"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(5)]


@pytest.fixture(scope="module")
def tok(demo_assets):
    return load_tokenizer(demo_assets["tokenizer"])


def _parquet(path, rows, **kw):
    pq.write_table(pa.Table.from_pylist(rows), path, **kw)
    return str(path)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _error(path, kind) -> DataError:
    with pytest.raises(DataError) as info:
        load_rows(path, kind)
    return info.value


# --- reading -----------------------------------------------------------------------------------------

def test_parquet_and_jsonl_read_the_same(tmp_path):
    rows = [dict(r, margin=float(i), extra="dropped") for i, r in enumerate(PREF)]
    a = load_rows(_parquet(tmp_path / "a.parquet", rows), "preference")
    b = load_rows(_jsonl(tmp_path / "b.jsonl", rows), "preference")
    assert a == b == [{k: v for k, v in r.items() if k != "extra"} for r in rows]


def test_optional_columns_and_chat_prompts(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "What is 1 + 1?"}], "ground_truth": 2, "data_source": None},
            {"prompt": "What is 2 + 2?", "ground_truth": "4", "data_source": "gsm8k"}]
    got = load_rows(_jsonl(tmp_path / "p.jsonl", rows), "prompts")
    assert got[0]["ground_truth"] == "2" and got[0]["prompt"][0]["content"] == "What is 1 + 1?"
    assert got[1] == rows[1]
    pref = load_rows(_jsonl(tmp_path / "m.jsonl", [dict(PREF[0], margin=None), PREF[1]]), "preference")
    assert pref[0]["margin"] == 0.0 and "margin" not in pref[1]


def test_parquet_is_streamed(tmp_path, monkeypatch):
    rows = [{"prompt": f"p{i}", "response": f"r{i}"} for i in range(5000)]
    path = _parquet(tmp_path / "big.parquet", rows, row_group_size=500)
    monkeypatch.setattr("engine.data._READ_BATCH_ROWS", 100)
    reads = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        for batch in original(self, *args, **kwargs):
            reads.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    first = list(itertools.islice(iter_rows(path, "sft"), 150))
    assert first[-1] == {"prompt": "p149", "response": "r149"}
    assert sum(reads) <= 200, "read more than the rows asked for"


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_missing_column_names_column(tmp_path, fmt):
    rows = [{"prompt": "p", "chosen": "c"}] * 3
    path = (_parquet if fmt == "parquet" else _jsonl)(tmp_path / f"x.{fmt}", rows)
    err = _error(path, "preference")
    assert err.param == "rejected" and err.data["row"] == 0 and "rejected" in err.message


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_wrong_type_names_column_and_row(tmp_path, fmt):
    rows = [{"prompt": "p", "response": "r"} for _ in range(4)] + [{"prompt": "p", "response": 7}]
    if fmt == "parquet":  # a column has one type: make the whole column wrong, the first row is named
        rows = [{"prompt": "p", "response": i} for i in range(5)]
    path = (_parquet if fmt == "parquet" else _jsonl)(tmp_path / f"x.{fmt}", rows)
    err = _error(path, "sft")
    assert err.param == "response" and err.data["row"] == (0 if fmt == "parquet" else 4)
    assert "row" in err.message and "response" in err.message


def test_null_cell_names_column_and_row_across_batches(tmp_path, monkeypatch):
    monkeypatch.setattr("engine.data._READ_BATCH_ROWS", 64)
    rows = [{"prompt": "p", "chosen": "c", "rejected": "r"} for _ in range(300)]
    rows[257]["chosen"] = None
    err = _error(_parquet(tmp_path / "n.parquet", rows, row_group_size=100), "preference")
    assert (err.param, err.data["row"]) == ("chosen", 257)


def test_bad_margin_and_ground_truth(tmp_path):
    err = _error(_jsonl(tmp_path / "m.jsonl", [PREF[0], dict(PREF[1], margin="big")]), "preference")
    assert (err.param, err.data["row"]) == ("margin", 1)
    err = _error(_jsonl(tmp_path / "g.jsonl", [{"prompt": "p", "ground_truth": [1]}]), "prompts")
    assert (err.param, err.data["row"]) == ("ground_truth", 0)
    err = _error(_jsonl(tmp_path / "c.jsonl", [{"prompt": [{"role": "user"}]}]), "prompts")
    assert err.param == "prompt"


def test_corrupt_parquet(tmp_path):
    good = _parquet(tmp_path / "g.parquet", PREF)
    data = Path(good).read_bytes()
    (tmp_path / "trunc.parquet").write_bytes(data[: len(data) // 2])
    err = _error(str(tmp_path / "trunc.parquet"), "preference")
    assert err.param == "file" and "parquet" in err.message
    (tmp_path / "junk.parquet").write_bytes(b"PAR1" + bytes(range(256)) * 4)
    assert _error(str(tmp_path / "junk.parquet"), "preference").param == "file"


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n" + bytes(200), b"prompt,chosen,rejected\na,b,c\n",
                                     b'[{"prompt": "p"}]\n'])
def test_neither_parquet_nor_jsonl(tmp_path, content):
    (tmp_path / "f.bin").write_bytes(content)
    err = _error(str(tmp_path / "f.bin"), "preference")
    assert err.param == "file" and err.data["row"] == 0


def test_bad_json_line_names_line(tmp_path):
    (tmp_path / "f.jsonl").write_text(json.dumps(PREF[0]) + "\n\n{not json\n")
    err = _error(str(tmp_path / "f.jsonl"), "preference")
    assert err.data == {"row": 1, "line": 3}


def test_empty_missing_and_unknown_kind(tmp_path):
    (tmp_path / "e.jsonl").write_text("")
    assert _error(str(tmp_path / "e.jsonl"), "sft").param == "file"
    assert _error(str(tmp_path / "nope.jsonl"), "sft").param == "file"
    assert _error(str(tmp_path / "e.jsonl"), "dpo").param == "kind"


# --- tokenizing --------------------------------------------------------------------------------------

def test_chat_template_prompt_and_eos(tok):
    [ex] = tokenize_sft([{"prompt": "What is 2 + 3?", "response": "2 + 3 = 5\n#### 5"}], tok, 64, 64, "error")
    prompt = tok.decode(ex.input_ids[: ex.prompt_len])
    assert prompt == "<|bos|>User: What is 2 + 3?\nAssistant:\n"
    assert tok.decode(ex.input_ids[ex.prompt_len:]) == "2 + 3 = 5\n#### 5<|eos|>"
    assert ex.input_ids.count(tok.bos_token_id) == 1 and ex.input_ids[-1] == tok.eos_token_id
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    [p] = tokenize_prompts([{"prompt": chat, "ground_truth": "x"}], tok, 64, "error")
    assert tok.decode(p.prompt_ids) == "<|bos|>System: Be brief.\nUser: Hi\nAssistant:\n"
    assert (p.text, p.ground_truth, p.data_source) == ("Hi", "x", None)


def test_without_chat_template_uses_plain_text(tok):
    import copy

    plain = copy.deepcopy(tok)
    plain.chat_template = None
    ids = prompt_token_ids(plain, "What is 2 + 3?")
    assert plain.decode(ids) == "<|bos|>What is 2 + 3?"


def test_truncation_policies(tok):
    rows = [{"prompt": "one two three four five six seven eight", "response": "a b c d e f g h i j"}]
    full = tokenize_sft(rows, tok, 100, 100, "error")[0]
    plen, rlen = full.prompt_len, len(full.input_ids) - full.prompt_len
    with pytest.raises(DataError) as info:
        tokenize_sft(rows * 3, tok, plen - 1, 100, "error")
    assert info.value.param == "prompt" and info.value.data["row"] == 0
    with pytest.raises(DataError) as info:
        tokenize_sft([{"prompt": "x", "response": "y"}] + rows, tok, 100, rlen - 1, "error")
    assert (info.value.param, info.value.data["row"]) == ("response", 1)
    left = tokenize_sft(rows, tok, 4, 3, "left")[0]
    assert left.input_ids[:4] == full.input_ids[plen - 4: plen] and left.prompt_len == 4
    assert left.input_ids[4:] == full.input_ids[plen: plen + 3]
    right = tokenize_sft(rows, tok, 4, 100, "right")[0]
    assert right.input_ids[:4] == full.input_ids[:4] and right.input_ids[4:] == full.input_ids[plen:]
    [p] = tokenize_prompts(rows, tok, 5, "left")
    assert p.prompt_ids == full.input_ids[plen - 5: plen]
    with pytest.raises(DataError):
        tokenize_prompts(rows, tok, 5, "center")


def test_middle_truncation_keeps_both_ends(tok):
    rows = [{"prompt": "one two three four five six seven eight", "response": "a b c d e f g h i j"}]
    full = tokenize_sft(rows, tok, 100, 100, "error")[0]
    plen = full.prompt_len
    middle = tokenize_sft(rows, tok, 5, 100, "middle")[0]
    assert middle.prompt_len == 5
    assert middle.input_ids[:5] == full.input_ids[:2] + full.input_ids[plen - 3: plen]
    assert middle.input_ids[5:] == full.input_ids[plen:]
    [p] = tokenize_prompts(rows, tok, 4, "middle")
    assert p.prompt_ids == full.input_ids[:2] + full.input_ids[plen - 2: plen]
    pref = [{"prompt": rows[0]["prompt"], "chosen": "a b", "rejected": "no"}]
    [whole] = tokenize_preference(pref, tok, 100, "error")
    limit = len(whole.chosen_ids) - 3
    [cut] = tokenize_preference(pref, tok, limit, "middle")
    keep = cut.chosen_prompt_len
    assert keep == plen - 3 and cut.chosen_ids[keep:] == whole.chosen_ids[plen:]
    assert cut.chosen_ids[:keep] == whole.chosen_ids[:keep // 2] + whole.chosen_ids[plen - (keep - keep // 2): plen]


def test_sft_max_length_cuts_the_response_end(tok):
    rows = [{"prompt": "one two three", "response": "a b c d e f g h i j"}]
    full = tokenize_sft(rows, tok, 100, 100, "error")[0]
    limit = len(full.input_ids) - 4
    with pytest.raises(DataError) as info:
        tokenize_sft(rows, tok, 100, 100, "error", max_length=limit)
    assert (info.value.param, info.value.data["max"]) == ("response", limit)
    for truncation in ("left", "right", "middle"):
        cut = tokenize_sft(rows, tok, 100, 100, truncation, max_length=limit)[0]
        assert cut.input_ids == full.input_ids[:limit] and cut.prompt_len == full.prompt_len
    # A prompt longer than max_length is cut by its policy, leaving one response token.
    tiny = tokenize_sft(rows, tok, 100, 100, "left", max_length=3)[0]
    assert tiny.prompt_len == 2 and tiny.input_ids == full.input_ids[full.prompt_len - 2: full.prompt_len + 1]


def test_filter_overlong_prompts_drops_rows(tok):
    short, long = "hi", "one two three four five six seven eight nine ten"
    limit = len(prompt_token_ids(tok, short))
    assert len(prompt_token_ids(tok, long)) > limit
    sft = [{"prompt": long, "response": "x"}, {"prompt": short, "response": "y"}]
    for truncation in ("error", "left"):
        kept = tokenize_sft(sft, tok, limit, 100, truncation, filter_overlong_prompts=True)
        assert [tok.decode(e.input_ids[e.prompt_len:]) for e in kept] == ["y<|eos|>"]
    assert len(tokenize_sft(sft, tok, limit, 100, "left")) == 2  # off: truncated, not dropped
    prompts = [{"prompt": long}, {"prompt": short}, {"prompt": long}]
    assert [p.text for p in tokenize_prompts(prompts, tok, limit, "error", filter_overlong_prompts=True)] == [short]
    pref = [{"prompt": long, "chosen": "a", "rejected": "b"}, {"prompt": short, "chosen": "c", "rejected": "d"}]
    [pair] = tokenize_preference(pref, tok, 100, "error", max_prompt_length=limit, filter_overlong_prompts=True)
    assert pair.chosen_prompt_len == limit
    assert len(tokenize_preference(pref, tok, 100, "error", max_prompt_length=limit)) == 2
    with pytest.raises(DataError) as info:
        tokenize_prompts(prompts[:1], tok, limit, "error", filter_overlong_prompts=True)
    assert info.value.param == "max_prompt_length"


def _task_tokenize(method: str, tok, rows: list[dict], **data) -> list:
    from engine.config import METHOD_CONFIGS, JobRequest, build_config
    from engine.methods.dpo import DPOTask
    from engine.methods.reward_model import RewardModelTask
    from engine.methods.rm_distill import DistillTask
    from engine.methods.sft import SFTTask

    config = build_config(METHOD_CONFIGS[method], {"data": data})
    cls = {"sft": SFTTask, "reward_model": RewardModelTask, "rm_distill": DistillTask, "dpo": DPOTask}[method]
    task = cls(JobRequest(job_id="j", method=method, config=config, model_path="", training_file="",
                          output_dir="", checkpoint_dir=""), torch.device("cpu"))
    task.tokenizer = tok
    if method == "sft":
        return task.tokenize(rows, "train")
    return task._tokenize_pairs(rows) if method == "dpo" else task._tokenize_pairs(rows, tok)


@pytest.mark.parametrize("method", ["sft", "reward_model", "rm_distill", "dpo"])
def test_tasks_pass_the_data_knobs_on(tok, method):
    """Each method's tokenizing reads `data.truncation` and `data.filter_overlong_prompts`."""
    short, long = "hi", "one two three four five six seven eight nine ten"
    limit = len(prompt_token_ids(tok, short))
    if method == "sft":
        rows = [{"prompt": long, "response": "x"}, {"prompt": short, "response": "y"}]
        lengths = {"max_prompt_length": limit}
    else:
        rows = [{"prompt": long, "chosen": "a", "rejected": "b"}, {"prompt": short, "chosen": "c", "rejected": "d"}]
        lengths = {"max_prompt_length": limit, "max_length": limit + 3}  # room for a short pair only
        assert len(prompt_token_ids(tok, long)) > limit + 3
    assert len(_task_tokenize(method, tok, rows, **lengths, filter_overlong_prompts=True)) == 1
    assert len(_task_tokenize(method, tok, rows, **lengths, truncation="middle")) == 2
    with pytest.raises(DataError):
        _task_tokenize(method, tok, rows, **lengths)


# --- batching ----------------------------------------------------------------------------------------

def test_pad_sides():
    ids, mask = pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    ids, mask = pad([[5, 6, 7], [8]], pad_id=0, side="left")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert ids.dtype == mask.dtype == torch.long


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(1, 300), max_size=120), max_tokens=st.integers(1, 1200),
       window=st.none() | st.integers(1, 50))
def test_token_budget_batches_property(lengths, max_tokens, window):
    batches = token_budget_batches(lengths, max_tokens, window)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert b
        # Within budget, except a sequence too long for any budget, which rides alone.
        assert len(b) * max(lengths[i] for i in b) <= max_tokens or len(b) == 1
    if window is not None:  # a window's rows never mix with another window's
        for b in batches:
            assert len({i // window for i in b}) == 1


def test_sorting_keeps_padding_low():
    lengths = [10, 200, 12, 190, 11, 205, 9, 198] * 4
    sorted_eff = padding_efficiency(token_budget_batches(lengths, 800), lengths)
    unsorted = [list(range(i, i + 4)) for i in range(0, len(lengths), 4)]
    assert sorted_eff > 0.85 and padding_efficiency(unsorted, lengths) < 0.6
    assert padding_efficiency([[0], [1]], [3, 4]) == 1.0


def test_gradient_accumulation_equals_full_batch(demo_assets, tok):
    """Sum of token losses / total token count per micro-batch: any split gives the full-batch gradient."""
    rows = load_rows(demo_assets["sft_val"], "sft")[:12]
    examples = tokenize_sft(rows, tok, 32, 32, "error")
    torch.manual_seed(0)
    model = load_policy(demo_assets["small_model"], ModelConfig())
    params = [p for p in model.parameters() if p.requires_grad]

    def token_loss_sum(idx):
        seqs = [examples[i].input_ids for i in idx]
        ids, mask = pad(seqs, tok.pad_token_id)
        loss_mask = mask.clone()
        for row, i in enumerate(idx):
            loss_mask[row, : examples[i].prompt_len] = 0  # response tokens only
        logits = model(input_ids=ids, attention_mask=mask).logits
        nll = -log_probs_from_logits(logits[:, :-1].float(), ids[:, 1:])
        return (nll * loss_mask[:, 1:]).sum(), loss_mask[:, 1:].sum()

    def grads_for(batches):
        model.zero_grad()
        total = sum(len(examples[i].input_ids) - examples[i].prompt_len for b in batches for i in b)
        for b in batches:
            loss, _ = token_loss_sum(b)
            (loss / total).backward()
        return [p.grad.clone() for p in params]

    everything = list(range(len(examples)))
    _, n_tokens = token_loss_sum(everything)
    assert n_tokens == sum(len(e.input_ids) - e.prompt_len for e in examples)
    full = grads_for([everything])
    lengths = [len(e.input_ids) for e in examples]
    for budget in (25, 60, 130):
        split = token_budget_batches(lengths, budget, window=5)
        assert len(split) > 1
        for g_full, g_split in zip(full, grads_for(split)):
            torch.testing.assert_close(g_split, g_full, atol=1e-6, rtol=1e-4)
