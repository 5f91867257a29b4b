"""Scores a pair method computes once, on rank 0, before training, and caches beside its
checkpoints: the teacher's scores (rm_distill) and the reference log-probs (dpo).

One parquet file of `(split, row, chosen, rejected)` holding, in its metadata, the key it was
computed under (content hashes of the weights and data, and the settings that change the numbers).
A file under another key is recomputed."""

from __future__ import annotations

import numpy as np

_KEY = b"keel_cache_key"


def read(path: str) -> tuple[str | None, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """`(key, {split: (chosen, rejected)})`, each array in row order."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    key = (table.schema.metadata or {}).get(_KEY, b"").decode() or None
    cols = table.to_pydict()
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for split in ("train", "val"):
        idx = sorted((i for i, s in enumerate(cols["split"]) if s == split), key=lambda i: cols["row"][i])
        out[split] = (np.array([cols["chosen"][i] for i in idx], dtype=np.float64),
                      np.array([cols["rejected"][i] for i in idx], dtype=np.float64))
    return key, out


def write(path: str, columns: dict[str, list], key: str) -> None:
    """`columns`: equal-length lists `split`, `row`, `chosen`, `rejected`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"split": pa.array(columns["split"], pa.string()), "row": pa.array(columns["row"], pa.int64()),
                      "chosen": pa.array(columns["chosen"], pa.float64()),
                      "rejected": pa.array(columns["rejected"], pa.float64())})
    pq.write_table(table.replace_schema_metadata({_KEY: key.encode()}), path)
