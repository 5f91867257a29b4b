"""Resource ids sort by creation order: cursor pagination ("newest first") relies on it."""

from __future__ import annotations

from core.ids import new_id


def test_ids_made_one_after_another_sort_in_that_order():
    ids = [new_id("ckpt") for _ in range(2000)]  # many share a millisecond
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(i.startswith("ckpt-") and len(i) == 5 + 26 for i in ids)
