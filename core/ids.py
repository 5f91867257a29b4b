"""Resource ids: a type prefix plus a time-ordered random part, so ids sort by creation time
(cursor pagination uses that order) and never reveal a row count."""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _b32(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        out.append(_ALPHABET[rem])
    return "".join(reversed(out))


def new_id(prefix: str) -> str:
    """`prefix-` + 10 chars of milliseconds + 16 chars of randomness (a ULID in lower case)."""
    millis = int(time.time() * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}-{_b32(millis, 10)}{_b32(rand, 16)}"
