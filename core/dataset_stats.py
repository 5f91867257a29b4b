"""Statistics of an uploaded dataset's columns (token-free: character lengths, numbers' range), and what
they bound at job creation: the fewest tokens a column's longest cell can take.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from core.dataset_rules import KINDS

_HIST_EXACT = 1024
"""Lengths below this are counted exactly for p95; above, in buckets 1% wide (p95 within 1%)."""
_HIST_RATIO = math.log(1.01)


class LengthStats:
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


class NumberStats:
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


def new_stats(columns: list[str]) -> dict[str, LengthStats | NumberStats]:
    return {c: NumberStats() if KINDS[c] == "number" else LengthStats() for c in columns}



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
