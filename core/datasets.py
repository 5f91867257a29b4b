"""Checks and statistics for uploaded datasets: the format by content (parquet or JSON Lines), then that
format's reader checks the columns and types the purpose needs (core/dataset_rules.py), null or empty
cells and the row count, and computes token-free length statistics (core/dataset_stats.py).
Parquet: core/parquet_datasets.py; JSON Lines: core/jsonl_datasets.py; OpenAI's fine-tune layouts:
core/finetune_files.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import pyarrow.parquet as pq

from core import finetune_files
from core.dataset_rules import OPTIONAL_COLUMNS, OUTPUT_COLUMNS, REQUIRED_COLUMNS, DatasetError, DatasetInfo
from core.jsonl_datasets import inspect_jsonl, jsonl_records
from core.parquet_datasets import PARQUET_MAGIC, inspect_parquet


def sniff_format(head: bytes) -> str:
    """`parquet` or `jsonl` from a file's first bytes; raises on anything else."""
    if not head:
        raise DatasetError("empty_file", "The file is empty.")
    if head[:4] == PARQUET_MAGIC:
        return "parquet"
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if not text or text[:1] == b"{":
        return "jsonl"
    hint = " (a JSON array is not JSON Lines: write one object per line)" if text[:1] == b"[" else ""
    raise DatasetError("invalid_file", f"Not a parquet or JSON Lines file{hint}.")


def inspect_dataset(source: str | BinaryIO, purpose: str) -> DatasetInfo:
    """Check a whole file for `purpose` and compute its statistics.

    `source` is a local path or a seekable binary file. Raises DatasetError (codes `empty_file`,
    `invalid_file`, `schema_mismatch`, `invalid_value`) on the first problem found.
    """
    if purpose == finetune_files.FINE_TUNE:
        return _inspect_fine_tune(source)
    if purpose not in REQUIRED_COLUMNS:
        raise ValueError(f"unknown purpose {purpose!r}")
    with _opened(source) as f:
        fmt = sniff_format(f.read(4096))
        f.seek(0)
        info = inspect_parquet(f, purpose) if fmt == "parquet" else inspect_jsonl(f, purpose)
    if info.rows == 0:
        raise DatasetError("empty_file", "The file has no rows.", row=0)
    return info


def preview_rows(source: str | BinaryIO, purpose: str, limit: int) -> list[dict[str, Any]]:
    """The first `limit` rows of an already checked file (or a job's output), with the purpose's columns only."""
    if purpose == finetune_files.FINE_TUNE:  # OpenAI's layouts: the rows as written
        with _opened(source) as f:
            return [record for _, (_, _, record) in zip(range(limit), finetune_files.records(f))]
    wanted = OUTPUT_COLUMNS.get(purpose) or REQUIRED_COLUMNS[purpose] + OPTIONAL_COLUMNS[purpose]
    with _opened(source) as f:
        if sniff_format(f.read(4096)) == "parquet":
            f.seek(0)
            pf = pq.ParquetFile(f, pre_buffer=False)
            columns = [c for c in wanted if c in pf.schema_arrow.names]
            for batch in pf.iter_batches(batch_size=limit, columns=columns, use_threads=False):
                return batch.to_pylist()[:limit]
            return []
        f.seek(0)
        rows = []
        for _, _, record in jsonl_records(f):
            rows.append({c: record[c] for c in wanted if c in record})
            if len(rows) >= limit:
                break
        return rows


def _inspect_fine_tune(source: str | BinaryIO) -> DatasetInfo:
    with _opened(source) as f:
        try:
            info = finetune_files.inspect(f)
        except finetune_files.FormatError as e:
            raise DatasetError(e.code, e.detail, param=e.param, row=e.row, line=e.line) from e
    return DatasetInfo("jsonl", info.rows, info.columns, {})


@contextmanager
def _opened(source: str | BinaryIO) -> Iterator[BinaryIO]:
    """A path is opened (and closed) here; a given file is rewound and left open."""
    if isinstance(source, str):
        with open(source, "rb") as f:
            yield f
    else:
        source.seek(0)
        yield source
