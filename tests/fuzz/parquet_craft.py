"""Rewrite integer fields of a parquet footer (Thrift compact protocol) to craft files no writer makes:
billions of declared rows, understated sizes. Test-only; core.parquet_datasets reads page headers itself."""

from __future__ import annotations

_INTS = (4, 5, 6)  # i16, i32, i64


def _varint(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _struct(buf, pos: int, path: tuple, out: list) -> int:
    last = 0
    while True:
        byte = buf[pos]
        pos += 1
        if byte == 0:
            return pos
        delta, ftype = byte >> 4, byte & 0x0F
        if delta:
            last += delta
        else:
            raw, pos = _varint(buf, pos)
            last = (raw >> 1) ^ -(raw & 1)
        pos = _value(buf, pos, ftype, (*path, last), out)


def _value(buf, pos: int, ftype: int, path: tuple, out: list) -> int:
    if ftype in (1, 2):
        return pos
    if ftype == 3:
        return pos + 1
    if ftype in _INTS:
        start = pos
        _, pos = _varint(buf, pos)
        out.append((path, start, pos))
        return pos
    if ftype == 7:
        return pos + 8
    if ftype == 8:
        n, pos = _varint(buf, pos)
        return pos + n
    if ftype in (9, 10):
        header = buf[pos]
        pos += 1
        size, etype = header >> 4, header & 0x0F
        if size == 15:
            size, pos = _varint(buf, pos)
        for _ in range(size):
            pos = pos + 1 if etype in (1, 2) else _value(buf, pos, etype, (*path, "*"), out)
        return pos
    if ftype == 11:
        size, pos = _varint(buf, pos)
        if size:
            types = buf[pos]
            pos += 1
            for _ in range(size):
                pos = _value(buf, pos, types >> 4, (*path, "k"), out)
                pos = _value(buf, pos, types & 0x0F, (*path, "v"), out)
        return pos
    if ftype == 12:
        return _struct(buf, pos, path, out)
    raise ValueError(f"unknown thrift type {ftype}")


def _encode(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)  # zigzag
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


FILE_NUM_ROWS = (3,)
"""FileMetaData.num_rows"""
ROW_GROUP_NUM_ROWS = (4, "*", 3)
"""RowGroup.num_rows, in every row group"""
ROW_GROUP_BYTES = (4, "*", 2)
"""RowGroup.total_byte_size"""
COLUMN_UNCOMPRESSED_BYTES = (4, "*", 1, "*", 3, 6)
"""ColumnChunk.meta_data.total_uncompressed_size, in every column chunk"""


def patch_footer(data: bytes, values: dict[tuple, int]) -> bytes:
    """`data` (a parquet file) with the footer's integer fields at the given paths set to new values."""
    n = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - n
    footer = bytearray(data[start:-8])
    fields: list = []
    _struct(footer, 0, (), fields)
    found = {path for path, _, _ in fields}
    missing = set(values) - found
    assert not missing, f"no such footer fields: {missing}"
    for path, a, b in reversed(fields):  # right to left: earlier offsets stay valid
        if path in values:
            footer[a:b] = _encode(values[path])
    return data[:start] + bytes(footer) + len(footer).to_bytes(4, "little") + b"PAR1"
