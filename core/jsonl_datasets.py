"""Checking an uploaded JSON Lines file for a purpose: one line at a time (each at most MAX_LINE_BYTES),
so memory stays flat whatever the file size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any, BinaryIO

import pyarrow as pa

from core.dataset_rules import (
    BATCH_ROWS,
    EXPECTED,
    KINDS,
    MAX_ROWS,
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
    DatasetError,
    DatasetInfo,
    bad_cell,
)
from core.dataset_stats import new_stats

MAX_LINE_BYTES = 64 * 1024**2
"""A JSON Lines record longer than this is refused (lines are read whole)."""


def jsonl_records(f: BinaryIO) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(row, line, record) for each non-blank line; raises DatasetError on a bad line."""
    row = 0
    line = 0
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        line += 1
        if len(raw) > MAX_LINE_BYTES:
            raise DatasetError("invalid_file", f"Line {line} is longer than {MAX_LINE_BYTES} bytes.",
                               row=row, line=line)
        if line == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            what = "Not a parquet or JSON Lines file" if row == 0 else "Invalid JSON"
            raise DatasetError("invalid_file", f"{what}: line {line}: {e}", row=row, line=line) from e
        except RecursionError as e:
            raise DatasetError("invalid_file", f"Line {line} is nested too deeply.", row=row, line=line) from e
        except ValueError as e:  # an integer over Python's digit limit (sys.get_int_max_str_digits)
            raise DatasetError("invalid_file", f"Line {line} holds an integer with too many digits.",
                               row=row, line=line) from e
        if not isinstance(record, dict):
            raise DatasetError("invalid_file", f"Line {line} is not a JSON object.", row=row, line=line)
        yield row, line, record
        row += 1


def inspect_jsonl(f: BinaryIO, purpose: str) -> DatasetInfo:
    required, optional = REQUIRED_COLUMNS[purpose], OPTIONAL_COLUMNS[purpose]
    present: set[str] = set()
    stats = new_stats(list(required + optional))
    pending: dict[str, list[Any]] = {c: [] for c in stats}
    rows = 0

    def flush() -> None:
        for column, values in pending.items():
            if values:
                nulls = sum(v is None for v in values)
                typ = pa.float64() if KINDS[column] == "number" else pa.int64()
                stats[column].add(pa.array(values, type=typ), nulls)
                values.clear()

    for row, line, record in jsonl_records(f):
        if row >= MAX_ROWS:
            raise DatasetError("invalid_file", f"The file has more than {MAX_ROWS} rows.", row=row, line=line)
        for column in required:
            if column not in record:
                raise DatasetError("schema_mismatch", f"Row {row} (line {line}): missing required column "
                                   f"{column!r} for purpose {purpose!r}.", param=column, row=row, line=line)
            pending[column].append(_jsonl_cell(column, record[column], row, line))
        for column in optional:
            if column in record:
                present.add(column)
                pending[column].append(_jsonl_cell(column, record[column], row, line))
        rows = row + 1
        if rows % BATCH_ROWS == 0:
            flush()
    flush()
    columns = [c for c in required + optional if c in required or c in present]
    return DatasetInfo("jsonl", rows, columns, {c: stats[c].summary() for c in columns})


def _jsonl_cell(column: str, value: Any, row: int, line: int) -> Any:
    """The statistic of one cell: its char length (a number's value), None for an allowed null."""
    kind = KINDS[column]

    def mistyped() -> DatasetError:
        return DatasetError("schema_mismatch", f"Row {row} (line {line}), column {column!r}: must be "
                            f"{EXPECTED[kind]}, got {type(value).__name__}.", param=column, row=row, line=line)

    def bad(what: str) -> DatasetError:
        return bad_cell(column, row, what, line)

    if value is None:
        if kind in ("prompt", "text"):
            raise bad("null")
        return None
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise mistyped()
        if not math.isfinite(value):
            raise bad(f"must be a finite number, got {value}")
        return float(value)
    if kind == "environment" and isinstance(value, dict):
        if not isinstance(value.get("type"), str):
            raise bad("an environment needs a string `type`")
        return len(json.dumps(value))
    if kind == "label" and isinstance(value, int) and not isinstance(value, bool):
        return len(str(value))
    if isinstance(value, str):
        if kind in ("prompt", "text") and not value.strip():
            raise bad("empty or whitespace only")
        return len(value)
    if kind == "prompt" and isinstance(value, list):
        if not value:
            raise bad("no messages")
        for m in value:
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise bad("messages must be {role, content} objects with string values")
        chars = sum(len(m["content"]) for m in value)
        if chars == 0:
            raise bad("empty messages")
        return chars
    raise mistyped()
