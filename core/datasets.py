"""Checks and statistics for uploaded datasets: format by content (parquet or JSON Lines), columns
and types per purpose, null or empty cells, row count, and token-free length statistics.

Parquet is read one bounded record batch at a time (sized from the row group's declared bytes per
row), JSON Lines one line at a time, so memory stays flat whatever the file size. The column rules
mirror engine/data.py, which the API must not import (it pulls in torch): a file accepted here is
one the engine reads. Stricter here: a required cell may not be empty or whitespace only.

Rows are numbered from 0 (as in engine.data's `DataError.data["row"]`); JSON Lines errors also give
the 1-based line.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core import finetune_files

PURPOSES = ("preference", "prompts", "sft", "fine-tune")
"""Purposes a user may upload (`fine-tune`: OpenAI's JSON Lines layouts, core/finetune_files.py)."""
OUTPUT_PURPOSES = ("eval_results", "fine-tune-results")
"""Purposes of files Keel writes itself (a job's results): listed and downloadable, never uploadable."""
OUTPUT_COLUMNS: dict[str, tuple[str, ...]] = {
    "eval_results": ("prompt_index", "sample_index", "prompt", "ground_truth", "data_source", "response",
                     "response_length", "score", "compare_response", "compare_response_length", "compare_score",
                     "outcome"),
}
"""The columns of each output purpose, in order (engine/evaluate.py writes them; `compare_*` and
`outcome` only for an evaluation with `compare_to`)."""
OUTPUT_COLUMNS["fine-tune-results"] = ("step", "train_loss", "train_accuracy", "valid_loss",
                                       "valid_mean_token_accuracy")
"""A fine-tuning job's step metrics as OpenAI writes them (CSV; api/openai/fine_tuning.py)."""
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "preference": ("prompt", "chosen", "rejected"),
    "prompts": ("prompt",),
    "sft": ("prompt", "response"),
}
OPTIONAL_COLUMNS: dict[str, tuple[str, ...]] = {
    "preference": ("margin",),
    "prompts": ("ground_truth", "data_source"),
    "sft": (),
}
_KIND = {"prompt": "prompt", "chosen": "text", "rejected": "text", "response": "text",
         "margin": "number", "ground_truth": "label", "data_source": "tag"}
"""prompt: non-empty string or non-empty list of {role, content} messages (VERL's layout);
text: non-empty string; number: finite number or null; label: string, integer or null; tag: string or null."""
_EXPECTED = {"prompt": "a string (or a list of {role, content} messages)", "text": "a string",
             "number": "a number", "label": "a string or an integer", "tag": "a string"}

PARQUET_MAGIC = b"PAR1"
MAX_ROWS = 100_000_000
"""More declared rows than this is refused before reading: no real preference set is that big."""
MAX_FOOTER_BYTES = 64 * 1024**2
"""Parquet metadata larger than this is refused (pyarrow would hold all of it in memory)."""
MAX_ROW_BYTES = 64 * 1024**2
"""A row group whose bytes per row exceed this is refused: one row must fit a batch."""
MAX_PAGE_BYTES = 256 * 1024**2
"""A page that decompresses to more than this is refused: pyarrow decodes a page whole (and writes
up to 1024 values per page, so this allows values of 256 KB on average)."""
MAX_LINE_BYTES = 64 * 1024**2
"""A JSON Lines record longer than this is refused (lines are read whole)."""
_BATCH_BYTES = 8 * 1024**2
"""Target decoded size of one parquet record batch."""
_READ_BUFFER = 256 * 1024
"""Parquet pages are read through a buffer of this size, never whole column chunks."""
_BATCH_ROWS = 4096
_HIST_EXACT = 1024
"""Lengths below this are counted exactly for p95; above, in buckets 1% wide (p95 within 1%)."""
_HIST_RATIO = math.log(1.01)


class DatasetError(Exception):
    """A problem with an uploaded file. `code` is the API error code, `param` the column (or "file")."""

    def __init__(self, code: str, detail: str, *, param: str = "file", row: int | None = None,
                 line: int | None = None) -> None:
        super().__init__(detail)
        self.code, self.detail, self.param, self.row, self.line = code, detail, param, row, line


@dataclass
class DatasetInfo:
    format: str
    """parquet | jsonl"""
    rows: int
    columns: list[str]
    """The purpose's columns present in the file (other columns are ignored, as by the engine)."""
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)


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
        info = _inspect_parquet(f, purpose) if fmt == "parquet" else _inspect_jsonl(f, purpose)
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
        for _, _, record in _jsonl_records(f):
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


# --- statistics ----------------------------------------------------------------------------------

class _LengthStats:
    """Character lengths (code points) of a column: min, mean, p95 (histogram), max; nulls counted."""

    def __init__(self) -> None:
        self.n = self.total = self.nulls = 0
        self.min: int | None = None
        self.max: int | None = None
        self.hist: Counter[int] = Counter()

    def add(self, lengths: pa.Array, nulls: int = 0) -> None:
        self.nulls += nulls
        lengths = lengths.drop_null().cast(pa.int64())
        if len(lengths) == 0:
            return
        mm = pc.min_max(lengths)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)
        self.n += len(lengths)
        self.total += pc.sum(lengths).as_py()
        # Bucket: the length itself below _HIST_EXACT, else _HIST_EXACT + floor(log_1.01(L / _HIST_EXACT)).
        log_bucket = pc.add(_HIST_EXACT, pc.cast(pc.floor(pc.divide(
            pc.ln(pc.divide(pc.max_element_wise(lengths, 1).cast(pa.float64()), float(_HIST_EXACT))),
            _HIST_RATIO)), pa.int64()))
        buckets = pc.if_else(pc.less(lengths, _HIST_EXACT), lengths, log_bucket)
        for item in pc.value_counts(buckets).to_pylist():
            self.hist[item["values"]] += item["counts"]

    def _bucket_floor(self, bucket: int) -> int:
        if bucket < _HIST_EXACT:
            return bucket
        return max(_HIST_EXACT, math.ceil(_HIST_EXACT * math.exp((bucket - _HIST_EXACT) * _HIST_RATIO)))

    def summary(self) -> dict[str, Any]:
        if self.n == 0:
            return {"min_chars": None, "mean_chars": None, "p95_chars": None, "max_chars": None,
                    "nulls": self.nulls}
        need, seen, p95 = math.ceil(0.95 * self.n), 0, self.max
        for bucket in sorted(self.hist):
            seen += self.hist[bucket]
            if seen >= need:
                p95 = min(self.max, max(self.min, self._bucket_floor(bucket)))
                break
        return {"min_chars": self.min, "mean_chars": round(self.total / self.n, 2), "p95_chars": p95,
                "max_chars": self.max, "nulls": self.nulls}


class _NumberStats:
    def __init__(self) -> None:
        self.n = self.nulls = 0
        self.total = 0.0
        self.min: float | None = None
        self.max: float | None = None

    def add(self, values: pa.Array, nulls: int = 0) -> None:
        self.nulls += nulls
        values = values.drop_null().cast(pa.float64())
        if len(values) == 0:
            return
        mm = pc.min_max(values)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)
        self.n += len(values)
        self.total += pc.sum(values).as_py()

    def summary(self) -> dict[str, Any]:
        mean = round(self.total / self.n, 6) if self.n else None
        return {"min": self.min, "mean": mean, "max": self.max, "nulls": self.nulls}


def _new_stats(columns: list[str]) -> dict[str, _LengthStats | _NumberStats]:
    return {c: _NumberStats() if _KIND[c] == "number" else _LengthStats() for c in columns}


# --- parquet -------------------------------------------------------------------------------------

def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or t == pa.string_view()


def _is_messages(t: pa.DataType) -> bool:
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
        return False
    fields = {f.name: f.type for f in t.value_type}
    return _is_text(fields.get("role", pa.null())) and _is_text(fields.get("content", pa.null()))


def _type_ok(kind: str, t: pa.DataType) -> bool:
    if kind == "prompt":
        return _is_text(t) or _is_messages(t)
    if kind == "text":
        return _is_text(t)
    if kind == "number":
        return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)
    if kind == "label":
        return _is_text(t) or pa.types.is_integer(t) or pa.types.is_null(t)
    return _is_text(t) or pa.types.is_null(t)


def _check_footer(f: BinaryIO) -> None:
    f.seek(0, 2)
    size = f.tell()
    if size < 12:
        raise DatasetError("invalid_file", "Corrupt parquet file: too short to hold a footer.")
    f.seek(size - 8)
    tail = f.read(8)
    footer = int.from_bytes(tail[:4], "little")
    if tail[4:] != PARQUET_MAGIC or footer + 12 > size:
        raise DatasetError("invalid_file", "Corrupt parquet file: truncated or no footer.")
    if footer > MAX_FOOTER_BYTES:
        raise DatasetError("invalid_file", f"Parquet metadata of {footer} bytes is larger than "
                           f"{MAX_FOOTER_BYTES}; write fewer, larger row groups.")
    f.seek(0)


def _inspect_parquet(f: BinaryIO, purpose: str) -> DatasetInfo:
    _check_footer(f)
    try:
        pf = pq.ParquetFile(f, pre_buffer=False, buffer_size=_READ_BUFFER)
    except (pa.ArrowException, OSError) as e:
        raise DatasetError("invalid_file", f"Corrupt parquet file: {e}") from e
    schema, meta = pf.schema_arrow, pf.metadata
    for column in REQUIRED_COLUMNS[purpose]:
        if column not in schema.names:
            raise DatasetError("schema_mismatch", f"Missing required column {column!r} for purpose "
                               f"{purpose!r} (the file has {sorted(schema.names)[:20]}).", param=column)
    columns = [c for c in REQUIRED_COLUMNS[purpose] + OPTIONAL_COLUMNS[purpose] if c in schema.names]
    for column in columns:
        t = schema.field(column).type
        if not _type_ok(_KIND[column], t):
            raise DatasetError("schema_mismatch", f"Column {column!r} must be {_EXPECTED[_KIND[column]]}, "
                               f"got {t}.", param=column)
    if meta.num_rows > MAX_ROWS:
        raise DatasetError("invalid_file", f"The file declares {meta.num_rows} rows; the limit is {MAX_ROWS}.")
    text_columns = [c for c in columns if _is_text(schema.field(c).type)]
    readers: dict[frozenset[str], pq.ParquetFile] = {}
    stats = _new_stats(columns)
    row = 0
    try:
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            if rg.num_rows == 0:
                continue
            decoded, dictionary_encoded = _decoded_bytes(f, rg, columns, i)
            per_row = max(rg.total_byte_size, decoded) / rg.num_rows
            as_dictionary = _dictionary_only(rg, text_columns)
            for column in (dictionary_encoded & set(text_columns)) - as_dictionary:
                # Read plain, each dictionary-encoded row may expand to the longest dictionary value.
                per_row += _longest_dictionary_value(f, meta, i, column)
            if per_row > MAX_ROW_BYTES:
                raise DatasetError("invalid_file", f"Row group {i} declares {per_row:.0f} bytes per row; "
                                   f"the limit is {MAX_ROW_BYTES}.", row=row)
            batch_rows = max(1, min(_BATCH_ROWS, int(_BATCH_BYTES / max(per_row, 1.0))))
            if as_dictionary not in readers:
                f.seek(0)
                readers[as_dictionary] = pq.ParquetFile(f, metadata=meta, pre_buffer=False,
                                                        buffer_size=_READ_BUFFER, read_dictionary=as_dictionary)
            for batch in readers[as_dictionary].iter_batches(batch_size=batch_rows, row_groups=[i],
                                                             columns=columns, use_threads=False):
                for column in columns:
                    _check_arrow_column(column, batch.column(column), row, stats[column])
                row += batch.num_rows
    except (pa.ArrowException, OSError) as e:
        raise DatasetError("invalid_file", f"Corrupt parquet file near row {row}: {e}", row=row) from e
    if row != meta.num_rows:
        raise DatasetError("invalid_file", f"Corrupt parquet file: {row} rows read, {meta.num_rows} declared.")
    return DatasetInfo("parquet", row, columns, {c: s.summary() for c, s in stats.items()})


def _dictionary_only(rg: pq.RowGroupMetaData, text_columns: list[str]) -> frozenset[str]:
    """The text columns stored in this row group as a dictionary page plus (almost) nothing but indices.

    Those are read as dictionaries and checked on their distinct values: one long value repeated
    over many rows, a few KB in the file, would otherwise decode to GBs. Columns with plain pages are
    read plain (their declared size is their decoded size), as rebuilding a dictionary costs memory.
    (A plain-read column whose first pages are dictionary-encoded has its batches sized for its
    longest dictionary value, see `_longest_dictionary_value`.)
    """
    out = set()
    for j in range(rg.num_columns):
        c = rg.column(j)
        if c.path_in_schema not in text_columns or not c.has_dictionary_page or c.dictionary_page_offset is None:
            continue
        index_bytes = c.total_compressed_size - (c.data_page_offset - c.dictionary_page_offset)
        if index_bytes <= 5 * rg.num_rows + 4096:  # <= 32-bit indices, levels and page headers
            out.add(c.path_in_schema)
    return frozenset(out)


def _longest_dictionary_value(f: BinaryIO, meta: pq.FileMetaData, index: int, column: str) -> int:
    """Bytes of the longest value in the column chunk's dictionary page (one row read as a dictionary:
    pyarrow decodes just that page, at most MAX_PAGE_BYTES)."""
    f.seek(0)
    reader = pq.ParquetFile(f, metadata=meta, pre_buffer=False, buffer_size=_READ_BUFFER, read_dictionary=[column])
    for batch in reader.iter_batches(batch_size=1, row_groups=[index], columns=[column], use_threads=False):
        arr = batch.column(0)
        values = arr.dictionary if pa.types.is_dictionary(arr.type) else arr
        if values.type == pa.string_view():
            values = values.cast(pa.large_string())
        return pc.max(pc.binary_length(values)).as_py() or 0
    return 0


def _decoded_bytes(f: BinaryIO, rg: pq.RowGroupMetaData, columns: list[str], index: int) -> tuple[int, set[str]]:
    """Bytes the row group's `columns` decompress to, from the page headers themselves, and the
    columns with dictionary-encoded data pages.

    pyarrow decodes each page by its header's size, whatever the footer claims, so a footer that
    understates its sizes would otherwise make batches far larger than planned. Only headers are
    read (a seek and a few bytes per page). Raises on a page over MAX_PAGE_BYTES or a broken chain."""
    total, dictionary_encoded = 0, set()
    for j in range(rg.num_columns):
        c = rg.column(j)
        if c.path_in_schema.split(".")[0] not in columns:
            continue
        start = c.data_page_offset
        if c.has_dictionary_page and c.dictionary_page_offset:
            start = min(start, c.dictionary_page_offset)
        pos, end, decoded, pages = start, start + c.total_compressed_size, 0, 0
        while pos < end:
            pages += 1
            if pages > _MAX_PAGES:
                raise DatasetError("invalid_file", f"Row group {index}, column {c.path_in_schema!r} has more "
                                   f"than {_MAX_PAGES} pages; write larger pages.")
            f.seek(pos)
            try:
                uncompressed, compressed, encoding = _page_header(f)
            except (EOFError, ValueError) as e:
                raise DatasetError("invalid_file", f"Corrupt parquet file: row group {index}, column "
                                   f"{c.path_in_schema!r}: unreadable page header ({e}).") from e
            if uncompressed < 0 or compressed < 0:
                raise DatasetError("invalid_file", f"Corrupt parquet file: row group {index}, column "
                                   f"{c.path_in_schema!r}: negative page size.")
            if uncompressed > MAX_PAGE_BYTES:
                raise DatasetError("invalid_file", f"Row group {index}, column {c.path_in_schema!r} has a page "
                                   f"that decompresses to {uncompressed} bytes; the limit is {MAX_PAGE_BYTES}.")
            if encoding in _DICTIONARY_ENCODINGS:
                dictionary_encoded.add(c.path_in_schema)
            header = f.tell() - pos
            decoded += header + uncompressed
            pos += header + compressed
        total += max(decoded, c.total_uncompressed_size)
    return total, dictionary_encoded


# Thrift's compact protocol, just enough to read a parquet page header (pyarrow does not expose them).
_I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = 4, 5, 6, 7, 8, 9, 10, 11, 12
_MAX_THRIFT_DEPTH = 16


_MAX_PAGES = 1_000_000
"""Pages per column chunk (a writer's default page is about 1 MB); more is refused."""
_DICTIONARY_ENCODINGS = (2, 8)
"""PLAIN_DICTIONARY, RLE_DICTIONARY: a data page of indices into the chunk's dictionary page."""


def _page_header(f: BinaryIO) -> tuple[int, int, int | None]:
    """(uncompressed_page_size, compressed_page_size, data page encoding or None) of the PageHeader
    at the file position; the position is left just after the header."""
    fields = _thrift_struct(f, 0)
    if not isinstance(fields.get(2), int) or not isinstance(fields.get(3), int):
        raise ValueError("no page sizes")  # noqa: TRY004 - a corrupt header, reported as one
    v1, v2 = fields.get(5), fields.get(8)  # DataPageHeader.encoding is field 2, DataPageHeaderV2's field 4
    encoding = v1.get(2) if isinstance(v1, dict) else v2.get(4) if isinstance(v2, dict) else None
    return fields[2], fields[3], encoding


def _thrift_byte(f: BinaryIO) -> int:
    b = f.read(1)
    if not b:
        raise EOFError("end of file inside a page header")
    return b[0]


def _thrift_varint(f: BinaryIO) -> int:
    result = shift = 0
    while shift < 70:
        b = _thrift_byte(f)
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise ValueError("varint too long")


def _thrift_struct(f: BinaryIO, depth: int) -> dict[int, Any]:
    """A struct's integer and struct fields by id (others are skipped)."""
    if depth > _MAX_THRIFT_DEPTH:
        raise ValueError("nested too deep")
    fields: dict[int, Any] = {}
    last = 0
    while True:
        byte = _thrift_byte(f)
        if byte == 0:
            return fields
        delta, ftype = byte >> 4, byte & 0x0F
        if delta:
            last += delta
        else:
            raw = _thrift_varint(f)
            last = (raw >> 1) ^ -(raw & 1)
        value = _thrift_value(f, ftype, depth)
        if value is not None:
            fields[last] = value


def _thrift_value(f: BinaryIO, ftype: int, depth: int) -> Any:
    if ftype in (1, 2):  # booleans live in the type
        return None
    if ftype == 3:
        _thrift_byte(f)
        return None
    if ftype in (_I16, _I32, _I64):
        raw = _thrift_varint(f)
        return (raw >> 1) ^ -(raw & 1)
    if ftype == _DOUBLE:
        f.read(8)
        return None
    if ftype == _BINARY:
        f.seek(_thrift_varint(f), 1)
        return None
    if ftype in (_LIST, _SET):
        header = _thrift_byte(f)
        size, etype = header >> 4, header & 0x0F
        if size == 15:
            size = _thrift_varint(f)
        for _ in range(size):
            if etype in (1, 2):
                _thrift_byte(f)
            else:
                _thrift_value(f, etype, depth + 1)
        return None
    if ftype == _MAP:
        size = _thrift_varint(f)
        if size:
            types = _thrift_byte(f)
            for _ in range(size):
                _thrift_value(f, types >> 4, depth + 1)
                _thrift_value(f, types & 0x0F, depth + 1)
        return None
    if ftype == _STRUCT:
        return _thrift_struct(f, depth + 1)
    raise ValueError(f"unknown thrift type {ftype}")


def _first(mask: pa.Array) -> int:
    return pc.index(mask.fill_null(False), True).as_py()


def _bad_cell(column: str, row: int, what: str, line: int | None = None) -> DatasetError:
    where = f"Row {row}" if line is None else f"Row {row} (line {line})"
    return DatasetError("invalid_value", f"{where}, column {column!r}: {what}.", param=column, row=row, line=line)


def _text_lengths(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(char length, is blank) per cell of a text column, computed once per distinct dictionary value."""
    values, indices = (arr.dictionary, arr.indices) if pa.types.is_dictionary(arr.type) else (arr, None)
    if values.type == pa.string_view():
        values = values.cast(pa.large_string())
    lengths = pc.utf8_length(values)
    blank = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0)
    if indices is None:
        return lengths, blank
    return pc.take(lengths, indices), pc.take(blank, indices)


def _check_arrow_column(column: str, arr: pa.Array, offset: int, stats: _LengthStats | _NumberStats) -> None:
    kind = _KIND[column]
    nulls = arr.null_count
    if kind in ("prompt", "text") and nulls:
        raise _bad_cell(column, offset + _first(pc.is_null(arr)), "null")
    if kind == "number":
        if pa.types.is_floating(arr.type) and len(arr) - nulls:
            finite = pc.is_finite(arr)
            if not pc.all(finite.fill_null(True)).as_py():
                row = offset + _first(pc.invert(finite))
                raise _bad_cell(column, row, f"must be a finite number, got {arr[row - offset].as_py()}")
        stats.add(arr, nulls)
        return
    if _is_text(arr.type):
        lengths, blank = _text_lengths(arr)
        if kind in ("prompt", "text") and pc.any(blank).as_py():
            raise _bad_cell(column, offset + _first(blank), "empty or whitespace only")
        stats.add(lengths, nulls)
        return
    if pa.types.is_integer(arr.type) or pa.types.is_null(arr.type):  # label as integer, or all null
        stats.add(pc.utf8_length(arr.cast(pa.string())), nulls)
        return
    # A prompt as chat messages: every row needs messages, every message a role and a content.
    if pc.any(pc.equal(pc.list_value_length(arr), 0)).as_py():
        raise _bad_cell(column, offset + _first(pc.equal(pc.list_value_length(arr), 0)), "no messages")
    parents = pc.list_parent_indices(arr)
    messages = pc.list_flatten(arr)
    for part in ("role", "content"):
        values = pc.struct_field(messages, part)
        if values.null_count or messages.null_count:
            bad = pc.or_(pc.is_null(values), pc.is_null(messages))
            raise _bad_cell(column, offset + parents[_first(bad)].as_py(), f"a message without a {part}")
    chars = pa.table({"row": parents, "chars": pc.utf8_length(pc.struct_field(messages, "content"))})
    per_row = chars.group_by("row", use_threads=False).aggregate([("chars", "sum")])
    totals = per_row["chars_sum"].combine_chunks()
    if pc.any(pc.equal(totals, 0)).as_py():
        raise _bad_cell(column, offset + per_row["row"][_first(pc.equal(totals, 0))].as_py(), "empty messages")
    stats.add(totals)


# --- JSON Lines ----------------------------------------------------------------------------------

def _jsonl_records(f: BinaryIO) -> Iterator[tuple[int, int, dict[str, Any]]]:
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


def _inspect_jsonl(f: BinaryIO, purpose: str) -> DatasetInfo:
    required, optional = REQUIRED_COLUMNS[purpose], OPTIONAL_COLUMNS[purpose]
    present: set[str] = set()
    stats = _new_stats(list(required + optional))
    pending: dict[str, list[Any]] = {c: [] for c in stats}
    rows = 0

    def flush() -> None:
        for column, values in pending.items():
            if values:
                nulls = sum(v is None for v in values)
                typ = pa.float64() if _KIND[column] == "number" else pa.int64()
                stats[column].add(pa.array(values, type=typ), nulls)
                values.clear()

    for row, line, record in _jsonl_records(f):
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
        if rows % _BATCH_ROWS == 0:
            flush()
    flush()
    columns = [c for c in required + optional if c in required or c in present]
    return DatasetInfo("jsonl", rows, columns, {c: stats[c].summary() for c in columns})


def _jsonl_cell(column: str, value: Any, row: int, line: int) -> Any:
    """The statistic of one cell: its char length (a number's value), None for an allowed null."""
    kind = _KIND[column]

    def mistyped() -> DatasetError:
        return DatasetError("schema_mismatch", f"Row {row} (line {line}), column {column!r}: must be "
                            f"{_EXPECTED[kind]}, got {type(value).__name__}.", param=column, row=row, line=line)

    def bad(what: str) -> DatasetError:
        return _bad_cell(column, row, what, line)

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


# --- token bounds at job creation ------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _longest_piece(path: str, mtime_ns: int) -> int | None:
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        vocab = (spec.get("model") or {}).get("vocab")
        pieces = list(vocab) if isinstance(vocab, dict) else [p[0] for p in vocab or [] if isinstance(p, list) and p]
        pieces += [t.get("content", "") for t in spec.get("added_tokens") or [] if isinstance(t, dict)]
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    longest = max((len(p) for p in pieces if isinstance(p, str)), default=0)
    return longest or None


def longest_token_chars(model_dir: str) -> int | None:
    """The most characters one token of the model's tokenizer can stand for: its longest vocabulary
    entry or added token (`tokenizer.json`; a byte-level entry counts bytes, never fewer than the
    characters it covers). None without a readable `tokenizer.json`. Cached per file version."""
    path = os.path.join(model_dir, "tokenizer.json")
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return None
    return _longest_piece(path, mtime)


def min_tokens(stats: dict[str, Any], column: str, chars_per_token: int) -> int:
    """The fewest tokens the column's longest cell can take (its recorded `max_chars` over the most
    characters a token can cover): a lower bound, so a length limit below it is certainly overrun
    by some row. 0 when the column has no length statistics."""
    longest = (stats.get(column) or {}).get("max_chars")
    return -(-longest // chars_per_token) if isinstance(longest, int) and longest > 0 else 0
