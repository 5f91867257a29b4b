"""core.datasets and its readers: format sniffing, column rules, bounded reading, statistics."""

from __future__ import annotations

import io
import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import dataset_rules, jsonl_datasets, parquet_datasets
from core.dataset_rules import DatasetError
from core.datasets import inspect_dataset, preview_rows


def parquet(table: pa.Table | list[dict], **kw) -> io.BytesIO:
    table = table if isinstance(table, pa.Table) else pa.Table.from_pylist(table)
    buf = io.BytesIO()
    pq.write_table(table, buf, **kw)
    buf.seek(0)
    return buf


def jsonl(rows: list[dict], prefix: bytes = b"") -> io.BytesIO:
    return io.BytesIO(prefix + b"".join(json.dumps(r).encode() + b"\n" for r in rows))


def error(source, purpose: str = "preference") -> DatasetError:
    with pytest.raises(DatasetError) as e:
        inspect_dataset(source, purpose)
    return e.value


PAIRS = [{"prompt": "p" * (i + 1), "chosen": "c", "rejected": "r"} for i in range(100)]


def test_p95_matches_the_exact_value_below_1024_and_is_within_1_percent_above():
    rng = random.Random(0)
    lengths = [rng.randint(1, 900) for _ in range(5000)] + [rng.randint(1024, 200_000) for _ in range(500)]
    rows = [{"prompt": "x" * n, "response": "y"} for n in lengths]
    stats = inspect_dataset(parquet(rows, row_group_size=700), "sft").stats["prompt"]
    exact = sorted(lengths)[int(0.95 * len(lengths)) - 1]
    assert stats["min_chars"] == min(lengths) and stats["max_chars"] == max(lengths)
    assert stats["mean_chars"] == pytest.approx(sum(lengths) / len(lengths), abs=0.01)
    assert abs(stats["p95_chars"] - exact) <= 0.01 * exact
    small = [n for n in lengths if n < 1024]
    stats = inspect_dataset(parquet([{"prompt": "x" * n, "response": "y"} for n in small]), "sft").stats
    assert stats["prompt"]["p95_chars"] == sorted(small)[int(0.95 * len(small)) - 1]


def test_lengths_count_characters_not_bytes():
    info = inspect_dataset(jsonl([{"prompt": "héllo 🙂", "response": "ok"}]), "sft")
    assert info.stats["prompt"]["max_chars"] == 7


def test_parquet_and_jsonl_give_the_same_info():
    rows = [{"prompt": f"q{i}", "ground_truth": i if i % 2 else str(i), "data_source": None if i % 3 else "gsm8k"}
            for i in range(50)]
    as_jsonl = inspect_dataset(jsonl(rows), "prompts")
    as_parquet = inspect_dataset(parquet([{**r, "ground_truth": str(r["ground_truth"])} for r in rows]), "prompts")
    assert as_jsonl.stats == as_parquet.stats and as_jsonl.rows == as_parquet.rows == 50
    assert as_jsonl.stats["data_source"]["nulls"] == 33


@pytest.mark.parametrize("column_type", [pa.large_string(), pa.string_view(), pa.dictionary(pa.int32(), pa.string())])
def test_string_like_parquet_types_are_accepted(column_type):
    table = pa.table({"prompt": pa.array(["a", "bb"]).cast(column_type), "response": ["x", "y"]})
    assert inspect_dataset(parquet(table), "sft").stats["prompt"]["max_chars"] == 2


def test_integer_margins_and_integer_ground_truth_are_accepted():
    info = inspect_dataset(parquet([{"prompt": "p", "chosen": "c", "rejected": "r", "margin": 3}]), "preference")
    assert info.stats["margin"] == {"min": 3.0, "mean": 3.0, "max": 3.0, "nulls": 0}
    assert inspect_dataset(parquet([{"prompt": "p", "ground_truth": 42}]), "prompts").stats["ground_truth"][
        "max_chars"] == 2


def test_errors_give_the_row_across_row_groups():
    rows = PAIRS[:] + [{"prompt": "p", "chosen": "c", "rejected": ""}]
    e = error(parquet(rows, row_group_size=7))
    assert (e.code, e.param, e.row) == ("invalid_value", "rejected", 100)
    assert "Row 100" in e.detail


def test_jsonl_errors_give_row_and_line_and_skip_blank_lines():
    e = error(io.BytesIO(b'{"prompt": "a", "response": "b"}\n\n\n{"prompt": "a", "response": 5}\n'), "sft")
    assert (e.code, e.param, e.row, e.line) == ("schema_mismatch", "response", 1, 4)


@pytest.mark.parametrize(("value", "code"), [(True, "schema_mismatch"), ("1.0", "schema_mismatch"),
                                             (float("inf"), "invalid_value")])
def test_margin_must_be_a_finite_number(value, code):
    body = json.dumps({"prompt": "p", "chosen": "c", "rejected": "r", "margin": value}).encode()
    assert error(io.BytesIO(body)).code == code


def test_null_margin_is_allowed():
    info = inspect_dataset(jsonl([{"prompt": "p", "chosen": "c", "rejected": "r", "margin": None}]), "preference")
    assert info.stats["margin"]["nulls"] == 1


@pytest.mark.parametrize(("prompt", "what"), [
    ([], "no messages"),
    ([{"role": "user", "content": ""}], "empty messages"),
    ([{"role": "user"}], "{role, content}"),
    ("   ", "whitespace"),
])
def test_chat_prompts_need_content(prompt, what):
    e = error(jsonl([{"prompt": "fine"}, {"prompt": prompt}]), "prompts")
    assert e.code == "invalid_value" and e.param == "prompt" and e.row == 1 and what in e.detail


def test_chat_prompts_in_parquet_need_content():
    msgs = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    table = pa.table({"prompt": pa.array([[{"role": "user", "content": "hi"}],
                                          [{"role": "user", "content": None}]], msgs)})
    e = error(parquet(table), "prompts")
    assert (e.code, e.param, e.row) == ("invalid_value", "prompt", 1)
    table = pa.table({"prompt": pa.array([[{"role": "user", "content": "hi"}], []], msgs)})
    assert error(parquet(table), "prompts").row == 1


def test_a_bom_before_jsonl_is_fine():
    assert inspect_dataset(jsonl([{"prompt": "p", "response": "r"}], prefix=b"\xef\xbb\xbf"), "sft").rows == 1


def test_a_jsonl_line_must_be_an_object():
    assert error(io.BytesIO(b'{"prompt": "p", "response": "r"}\n[1]\n'), "sft").code == "invalid_file"


def test_declared_row_counts_are_bounded(monkeypatch):
    monkeypatch.setattr(parquet_datasets, "MAX_ROWS", 50)
    monkeypatch.setattr(jsonl_datasets, "MAX_ROWS", 50)
    e = error(parquet(PAIRS))
    assert e.code == "invalid_file" and "100 rows" in e.detail
    assert error(jsonl(PAIRS)).code == "invalid_file"


def test_huge_rows_are_refused_before_decoding(monkeypatch):
    monkeypatch.setattr(parquet_datasets, "MAX_ROW_BYTES", 100)
    rows = [{"prompt": "p" * 1000, "chosen": "c", "rejected": "r"}]
    e = error(parquet(rows, compression="zstd"))
    assert e.code == "invalid_file" and "bytes per row" in e.detail


def test_huge_parquet_footers_are_refused(monkeypatch):
    monkeypatch.setattr(parquet_datasets, "MAX_FOOTER_BYTES", 64)
    assert "metadata" in error(parquet(PAIRS)).detail


def test_long_jsonl_lines_are_refused(monkeypatch):
    monkeypatch.setattr(jsonl_datasets, "MAX_LINE_BYTES", 100)
    e = error(jsonl([{"prompt": "p" * 200, "chosen": "c", "rejected": "r"}]))
    assert e.code == "invalid_file" and e.line == 1


def test_batches_are_sized_by_declared_bytes_per_row(monkeypatch):
    """Wide rows are read a few at a time: memory follows _BATCH_BYTES, not the row group size."""
    monkeypatch.setattr(parquet_datasets, "_BATCH_BYTES", 10_000)
    seen = []
    real = parquet_datasets._check_arrow_column

    def spy(column, arr, offset, stats):
        seen.append(len(arr))
        return real(column, arr, offset, stats)

    monkeypatch.setattr(parquet_datasets, "_check_arrow_column", spy)
    rows = [{"prompt": f"{i:04d}" * 500, "response": "r"} for i in range(100)]
    assert inspect_dataset(parquet(rows, compression="none"), "sft").rows == 100
    assert max(seen) <= 5


def test_repeated_text_is_checked_without_expanding_it():
    """A dictionary-encoded column of one long value is checked on the value, not on every copy."""
    table = pa.table({"prompt": pa.array(["x" * 100_000] * 2000), "response": pa.array(["y"] * 2000)})
    source = parquet(table, compression="zstd")
    assert len(source.getvalue()) < 100_000  # 200 MB of text in a tiny file
    info = inspect_dataset(source, "sft")
    assert info.rows == 2000 and info.stats["prompt"]["p95_chars"] == 100_000
    rows = [{"prompt": "p", "response": "r"}] * 50 + [{"prompt": " ", "response": "r"}]
    e = error(parquet(rows), "sft")
    assert (e.code, e.param, e.row) == ("invalid_value", "prompt", 50)


def test_preview_reads_only_the_first_rows(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{**r, "extra": 1} for r in PAIRS]), path, row_group_size=10)
    assert preview_rows(str(path), "preference", 3) == PAIRS[:3]
    assert preview_rows(jsonl(PAIRS), "preference", 2) == PAIRS[:2]


GOOD = [
    ("preference", [{"prompt": "p", "chosen": "c", "rejected": "r", "margin": 0.5},
                    {"prompt": "q", "chosen": "c", "rejected": "r", "margin": None}]),
    ("preference", [{"prompt": [{"role": "user", "content": "hi"}], "chosen": "c", "rejected": "r"}]),
    ("prompts", [{"prompt": "What is 3 + 4?", "ground_truth": "7", "data_source": "gsm8k"},
                 {"prompt": "2 + 2?", "ground_truth": None, "data_source": None}]),
    ("prompts", [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]}]),
    ("sft", [{"prompt": "Say hi", "response": "hi"}]),
]


@pytest.mark.parametrize(("purpose", "rows"), GOOD)
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_what_is_accepted_here_the_engine_reads(tmp_path, purpose, rows, fmt):
    """The column rules mirror engine/data.py (which the API must not import); keep them in step."""
    engine_data = pytest.importorskip("engine.data")
    assert engine_data.REQUIRED_COLUMNS == dataset_rules.REQUIRED_COLUMNS
    assert engine_data.OPTIONAL_COLUMNS == dataset_rules.OPTIONAL_COLUMNS
    path = tmp_path / f"d.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_bytes(jsonl(rows).getvalue())
    assert inspect_dataset(str(path), purpose).rows == len(engine_data.load_rows(str(path), purpose))
