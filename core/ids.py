"""Resource ids: a type prefix plus a time-ordered random part, so ids sort by creation time
(cursor pagination uses that order) and never reveal a row count."""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _b32(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        out.append(_ALPHABET[rem])
    return "".join(reversed(out))


_lock = threading.Lock()
_last = (0, 0)


def new_id(prefix: str) -> str:
    """`prefix-` + 10 chars of milliseconds + 16 chars of randomness (a ULID in lower case).

    Monotonic within this process, as the ULID spec allows: an id made in the same millisecond as
    the previous one (or with the clock stepped back) takes the previous random part plus one, so
    ids made one after another always sort in that order."""
    global _last
    with _lock:
        millis = int(time.time() * 1000)
        last_millis, last_rand = _last
        if millis <= last_millis and last_rand + 1 < 1 << 80:
            millis, rand = last_millis, last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _last = (millis, rand)
    return f"{prefix}-{_b32(millis, 10)}{_b32(rand, 16)}"
