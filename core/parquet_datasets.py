"""Checking an uploaded parquet file for a purpose: one bounded record batch at a time (sized from the row
group's declared bytes per row), pages read through a small buffer, so memory stays flat whatever the
file size. Page headers are read here (a small Thrift reader) to refuse pages that would decompress to
too much before pyarrow decodes them.
"""

from __future__ import annotations

from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

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
from core.dataset_stats import LengthStats, NumberStats, new_stats

PARQUET_MAGIC = b"PAR1"
MAX_FOOTER_BYTES = 64 * 1024**2
"""Parquet metadata larger than this is refused (pyarrow would hold all of it in memory)."""
MAX_ROW_BYTES = 64 * 1024**2
"""A row group whose bytes per row exceed this is refused: one row must fit a batch."""
MAX_PAGE_BYTES = 256 * 1024**2
"""A page that decompresses to more than this is refused: pyarrow decodes a page whole (and writes
up to 1024 values per page, so this allows values of 256 KB on average)."""
_BATCH_BYTES = 8 * 1024**2
"""Target decoded size of one parquet record batch."""
_READ_BUFFER = 256 * 1024
"""Parquet pages are read through a buffer of this size, never whole column chunks."""


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


def inspect_parquet(f: BinaryIO, purpose: str) -> DatasetInfo:
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
        if not _type_ok(KINDS[column], t):
            raise DatasetError("schema_mismatch", f"Column {column!r} must be {EXPECTED[KINDS[column]]}, "
                               f"got {t}.", param=column)
    if meta.num_rows > MAX_ROWS:
        raise DatasetError("invalid_file", f"The file declares {meta.num_rows} rows; the limit is {MAX_ROWS}.")
    text_columns = [c for c in columns if _is_text(schema.field(c).type)]
    readers: dict[frozenset[str], pq.ParquetFile] = {}
    stats = new_stats(columns)
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
            batch_rows = max(1, min(BATCH_ROWS, int(_BATCH_BYTES / max(per_row, 1.0))))
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


def _check_arrow_column(column: str, arr: pa.Array, offset: int, stats: LengthStats | NumberStats) -> None:
    kind = KINDS[column]
    nulls = arr.null_count
    if kind in ("prompt", "text") and nulls:
        raise bad_cell(column, offset + _first(pc.is_null(arr)), "null")
    if kind == "number":
        if pa.types.is_floating(arr.type) and len(arr) - nulls:
            finite = pc.is_finite(arr)
            if not pc.all(finite.fill_null(True)).as_py():
                row = offset + _first(pc.invert(finite))
                raise bad_cell(column, row, f"must be a finite number, got {arr[row - offset].as_py()}")
        stats.add(arr, nulls)
        return
    if _is_text(arr.type):
        lengths, blank = _text_lengths(arr)
        if kind in ("prompt", "text") and pc.any(blank).as_py():
            raise bad_cell(column, offset + _first(blank), "empty or whitespace only")
        stats.add(lengths, nulls)
        return
    if pa.types.is_integer(arr.type) or pa.types.is_null(arr.type):  # label as integer, or all null
        stats.add(pc.utf8_length(arr.cast(pa.string())), nulls)
        return
    # A prompt as chat messages: every row needs messages, every message a role and a content.
    if pc.any(pc.equal(pc.list_value_length(arr), 0)).as_py():
        raise bad_cell(column, offset + _first(pc.equal(pc.list_value_length(arr), 0)), "no messages")
    parents = pc.list_parent_indices(arr)
    messages = pc.list_flatten(arr)
    for part in ("role", "content"):
        values = pc.struct_field(messages, part)
        if values.null_count or messages.null_count:
            bad = pc.or_(pc.is_null(values), pc.is_null(messages))
            raise bad_cell(column, offset + parents[_first(bad)].as_py(), f"a message without a {part}")
    chars = pa.table({"row": parents, "chars": pc.utf8_length(pc.struct_field(messages, "content"))})
    per_row = chars.group_by("row", use_threads=False).aggregate([("chars", "sum")])
    totals = per_row["chars_sum"].combine_chunks()
    if pc.any(pc.equal(totals, 0)).as_py():
        raise bad_cell(column, offset + per_row["row"][_first(pc.equal(totals, 0))].as_py(), "empty messages")
    stats.add(totals)
