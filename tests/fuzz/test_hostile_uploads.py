"""Hostile uploads over real HTTP (uvicorn on loopback, the file streamed from disk): crafted parquet
footers, deeply nested types, huge cells, a JSON Lines line past the limit, and compression bombs.
Each one is a clear 4xx that leaves no row and no bytes behind, or, when the data is in fact valid,
a 201; either way the server's memory stays bounded: the peak resident size of this process (server
and client) and the peak of Python allocations (tracemalloc) are measured around the request."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import io
import os
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Self

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import security_support
from parquet_craft import (
    COLUMN_UNCOMPRESSED_BYTES,
    FILE_NUM_ROWS,
    ROW_GROUP_BYTES,
    ROW_GROUP_NUM_ROWS,
    patch_footer,
)
from serving import serve

from core import jsonl_datasets

MB = 1024**2
files_api = security_support.api_files()


class PeakMemory:
    """Peaks inside the block, in bytes: growth of the resident size (Linux: VmHWM after resetting it;
    else a 2 ms sampler), Python allocations (tracemalloc) and Arrow allocations (a proxy of Arrow's
    default pool). Freed memory is handed back first, so the resident size cannot hide reuse."""

    def __enter__(self) -> Self:
        gc.collect()
        pa.default_memory_pool().release_unused()
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        self._pool = pa.default_memory_pool()
        self._proxy = pa.proxy_memory_pool(self._pool)
        pa.set_memory_pool(self._proxy)
        self._hwm = _reset_hwm()
        self.base = _rss()
        self._peak, self._stop = self.base, threading.Event()
        if not self._hwm:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        tracemalloc.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self._peak = max(self._peak, _rss())

    def __exit__(self, *exc) -> None:
        self.python = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        pa.set_memory_pool(self._pool)
        self.arrow = self._proxy.max_memory()
        if self._hwm:
            self._peak = _status("VmHWM")
        else:
            self._stop.set()
            self._thread.join()
        self.rss = max(0, self._peak - self.base)

    @property
    def peak(self) -> int:
        """The largest of the three: what the request cost at most, however it was allocated."""
        return max(self.rss, self.python, self.arrow)

    def __str__(self) -> str:
        return (f"peak RSS +{self.rss / MB:.0f} MB, Python {self.python / MB:.0f} MB, "
                f"Arrow {self.arrow / MB:.0f} MB")


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _rss() -> int:
    try:
        return _status("VmRSS")
    except OSError:
        import psutil

        return psutil.Process().memory_info().rss


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def live(app):
    with serve(app) as url:
        yield url


@pytest.fixture
def post_file(live, auth, other_auth, project_key, keel_home, db, tmp_path):
    """Upload a file from disk over HTTP, measuring memory; checks that a refusal leaves nothing."""
    def post(path: Path, purpose: str) -> tuple[httpx.Response, PeakMemory]:
        with PeakMemory() as memory, path.open("rb") as fh:
            r = httpx.post(f"{live}/v1/files", headers=auth, data={"purpose": purpose},
                           files={"file": (path.name, fh)}, timeout=300)
        print(f"{path.name}: {path.stat().st_size / MB:.2f} MB -> {r.status_code}; {memory}")
        if r.status_code >= 400:
            assert files_api.project_blobs(keel_home, project_key[0]) == []
            assert files_api.project_rows(db, project_key[0]) == []
        return r, memory
    # One small upload first (by another project): imports and pools warm up outside the measurements.
    warm = tmp_path / "warm.jsonl"
    warm.write_bytes(files_api.jsonl_bytes([{"prompt": f"warm {os.urandom(4).hex()}", "response": "r"}]))
    with warm.open("rb") as fh:
        r = httpx.post(f"{live}/v1/files", headers=other_auth, data={"purpose": "sft"},
                       files={"file": (warm.name, fh)})
    assert r.status_code == 201, r.text
    return post


def problem(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["code"] == code and body["status"] == status, body
    return body


def write_parquet(path: Path, table: pa.Table, **kw) -> Path:
    pq.write_table(table, path, **kw)
    return path


def pairs(n: int, **columns) -> pa.Table:
    data = {"prompt": pa.array([f"q{i}" for i in range(n)]), "chosen": pa.array(["c"] * n),
            "rejected": pa.array(["r"] * n)}
    return pa.table({**data, **columns})


# --- crafted row counts -------------------------------------------------------------------------------

def test_billions_of_declared_rows_are_refused_before_reading(tmp_path, post_file):
    data = io.BytesIO()
    pq.write_table(pairs(10), data)
    path = tmp_path / "billions.parquet"
    path.write_bytes(patch_footer(data.getvalue(), {FILE_NUM_ROWS: 5_000_000_000}))
    assert pq.ParquetFile(path).metadata.num_rows == 5_000_000_000
    r, memory = post_file(path, "preference")
    assert "5000000000 rows" in problem(r, 422, "invalid_file")["detail"]
    assert memory.peak < 64 * MB


def test_row_groups_that_claim_more_rows_than_they_hold_are_refused(tmp_path, post_file):
    data = io.BytesIO()
    pq.write_table(pairs(10), data)
    path = tmp_path / "claims.parquet"
    path.write_bytes(patch_footer(data.getvalue(), {FILE_NUM_ROWS: 99_000_000, ROW_GROUP_NUM_ROWS: 99_000_000}))
    r, memory = post_file(path, "preference")
    assert "declared" in problem(r, 422, "invalid_file")["detail"]
    assert memory.peak < 64 * MB


# --- deeply nested types ------------------------------------------------------------------------------

def nested(depth: int, leaf: pa.DataType | None = None, value: object = "x") -> tuple[pa.DataType, object]:
    """A list type `depth` levels deep around `leaf` (a string), and a value of it."""
    t, v = leaf or pa.string(), value
    for _ in range(depth):
        t, v = pa.list_(t), [v]
    return t, v


@pytest.mark.parametrize(("depth", "code"), [(8, "schema_mismatch"), (40, "schema_mismatch"),
                                           (64, "invalid_file")])  # pyarrow reads 100 schema levels at most
def test_deeply_nested_required_columns_are_refused(tmp_path, post_file, depth, code):
    t, v = nested(depth)
    table = pa.table({"prompt": pa.array([v, v], type=t), "response": pa.array(["a", "b"])})
    r, _ = post_file(write_parquet(tmp_path / f"nested{depth}.parquet", table), "sft")
    body = problem(r, 422, code)
    assert body["param"] == ("prompt" if code == "schema_mismatch" else "file")


def test_nested_lists_of_messages_are_a_schema_mismatch(tmp_path, post_file):
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    t, v = nested(30, message, {"role": "user", "content": "hi"})
    table = pa.table({"prompt": pa.array([v], type=t), "response": pa.array(["a"])})
    r, _ = post_file(write_parquet(tmp_path / "messages.parquet", table), "sft")
    assert problem(r, 422, "schema_mismatch")["param"] == "prompt"


def test_a_deeply_nested_extra_column_is_ignored(tmp_path, post_file):
    """Columns the purpose does not use are never decoded, however they are shaped (within the 100
    schema levels pyarrow reads; deeper is an `invalid_file` as above)."""
    t, v = nested(40)
    table = pa.table({"prompt": pa.array(["p1", "p2"]), "response": pa.array(["a", "b"]),
                      "extra": pa.array([v, v], type=t)})
    r, _ = post_file(write_parquet(tmp_path / "extra.parquet", table), "sft")
    assert r.status_code == 201, r.text
    assert r.json()["columns"] == ["prompt", "response"]


def test_deeply_nested_jsonl_is_a_4xx(tmp_path, post_file):
    path = tmp_path / "deep.jsonl"
    depth = 200_000  # past any recursive parser's stack
    path.write_text('{"prompt": ' + "[" * depth + "]" * depth + ', "response": "r"}\n')
    r, _ = post_file(path, "sft")
    assert r.status_code == 422, r.text
    assert r.json()["code"] in ("invalid_file", "schema_mismatch")


# --- huge cells ----------------------------------------------------------------------------------------

@pytest.mark.slow  # builds hundreds of MB to compress
def test_a_single_huge_cell_is_refused_before_decoding(tmp_path, post_file):
    """100 MB in one row: more than a row may hold (MAX_ROW_BYTES); a few KB on disk."""
    table = pa.table({"prompt": pa.array(["p"]), "response": pa.array(["x" * (100 * MB)])})
    path = write_parquet(tmp_path / "cell.parquet", table, compression="zstd", use_dictionary=False)
    del table
    r, memory = post_file(path, "sft")
    assert "bytes per row" in problem(r, 422, "invalid_file")["detail"]
    assert memory.peak < 64 * MB


@pytest.mark.slow  # builds hundreds of MB to compress
def test_a_huge_cell_among_small_rows_is_refused_before_decoding(tmp_path, post_file):
    """300 MB hidden among 4,095 tiny rows (the average row is small): its page is over the limit."""
    n = 4096
    responses = pa.array(["x" * (300 * MB)] + ["r"] * (n - 1))
    table = pa.table({"prompt": pa.array([f"p{i}" for i in range(n)]), "response": responses})
    path = write_parquet(tmp_path / "hidden.parquet", table, compression="zstd", use_dictionary=False)
    del table, responses
    gc.collect()
    r, memory = post_file(path, "sft")
    assert "page that decompresses" in problem(r, 422, "invalid_file")["detail"]
    assert memory.peak < 64 * MB


@pytest.mark.slow  # builds hundreds of MB to compress
def test_a_jsonl_line_past_the_limit_is_refused_with_bounded_memory(tmp_path, post_file):
    """One line of MAX_LINE_BYTES + 1 MB: refused on that line; memory about the limit, never the file."""
    path = tmp_path / "longline.jsonl"
    size = jsonl_datasets.MAX_LINE_BYTES + MB
    with path.open("wb") as f:
        f.write(b'{"prompt": "')
        chunk = b"a" * MB
        for _ in range(size // MB):
            f.write(chunk)
        f.write(b'", "response": "r"}\n')
    started = time.monotonic()
    r, memory = post_file(path, "sft")
    body = problem(r, 422, "invalid_file")
    assert f"longer than {jsonl_datasets.MAX_LINE_BYTES} bytes" in body["detail"] and body["errors"][0]["line"] == 1
    assert memory.peak < jsonl_datasets.MAX_LINE_BYTES + 128 * MB, str(memory)
    assert time.monotonic() - started < 60


# --- compression bombs --------------------------------------------------------------------------------

@pytest.mark.slow  # builds hundreds of MB to compress
def test_a_plain_compression_bomb_is_refused_before_decoding(tmp_path, post_file):
    """2.4 GB of text in a file of about 100 KB (plain pages, zstd; 8 row groups of 300 MB, written
    from one batch): refused on its page sizes, before anything is decoded."""
    batch = pa.table({"prompt": pa.array(["p"] * 300), "response": pa.array(["x" * MB] * 300)})
    path = tmp_path / "bomb.parquet"
    with pq.ParquetWriter(path, batch.schema, compression="zstd", use_dictionary=False) as writer:
        for _ in range(8):
            writer.write_table(batch)
    del batch
    meta = pq.ParquetFile(path).metadata
    assert path.stat().st_size < MB and sum(meta.row_group(i).total_byte_size for i in range(8)) > 2_400 * MB
    r, memory = post_file(path, "sft")
    assert "page that decompresses" in problem(r, 422, "invalid_file")["detail"]
    assert memory.peak < 64 * MB


def test_a_bomb_whose_footer_understates_its_sizes_is_still_bounded(tmp_path, post_file):
    """The footer claims 1 byte per row; the page headers (what pyarrow decodes by) are believed.
    (Memory is then about one page, ~20 MB here, plus a batch; believing the footer, one batch of
    4,096 rows was 80 MB of this text, and with longer rows any size.)"""
    n = 20_000
    table = pa.table({"prompt": pa.array(["p"] * n), "response": pa.array(["y" * 20_000] * n)})
    data = io.BytesIO()
    pq.write_table(table, data, compression="zstd", use_dictionary=False, row_group_size=n)
    del table
    path = tmp_path / "liar.parquet"
    path.write_bytes(patch_footer(data.getvalue(), {ROW_GROUP_BYTES: n, COLUMN_UNCOMPRESSED_BYTES: n}))
    r, memory = post_file(path, "sft")  # 400 MB of text, valid: accepted, read in batches of ~8 MB
    assert r.status_code == 201, r.text
    assert memory.peak < 160 * MB, str(memory)


def test_a_dictionary_bomb_is_checked_without_expanding(tmp_path, post_file):
    """One 1 MB value repeated 10,000 times: 10 GB as text, a few KB as a dictionary."""
    n = 10_000
    table = pa.table({"prompt": pa.array([f"p{i}" for i in range(n)]),
                      "response": pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()),
                                                                 pa.array(["z" * MB]))})
    path = write_parquet(tmp_path / "dict.parquet", table, compression="zstd")
    del table
    r, memory = post_file(path, "sft")
    assert r.status_code == 201, r.text
    assert r.json()["stats"]["response"]["max_chars"] == MB
    assert memory.peak < 160 * MB, str(memory)


@pytest.mark.slow  # builds hundreds of MB to compress
def test_a_dictionary_bomb_behind_plain_pages_is_bounded(tmp_path, post_file):
    """A stock writer's dictionary fallback: 800 rows of one 400 KB value (dictionary-encoded), then
    100,000 random short values (plain pages, which defeat a "mostly indices" check). Read plain, the
    first 800 rows expand to 320 MB in one batch; batches are sized for the longest dictionary value."""
    big, small = 800, 100_000
    values = ["v" * 400_000] * big + [os.urandom(9).hex() for _ in range(small)]
    table = pa.table({"prompt": pa.array(["p"] * (big + small)), "response": pa.array(values)})
    del values
    path = write_parquet(tmp_path / "fallback.parquet", table, compression="zstd", row_group_size=big + small)
    del table
    encodings = pq.ParquetFile(path).metadata.row_group(0).column(1).encodings
    assert "RLE_DICTIONARY" in encodings and "PLAIN" in encodings
    r, memory = post_file(path, "sft")
    assert r.status_code == 201, r.text
    assert r.json()["rows"] == big + small
    assert memory.peak < 160 * MB, str(memory)
