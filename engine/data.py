"""Datasets: parquet / JSON Lines rows -> checked dicts -> token ids -> token-budget micro-batches.

Parquet is streamed one record batch at a time (never the whole file), JSON Lines one line at a
time. Every problem with a file raises `DataError` with `param` = the column and `data["row"]` = the
0-based index of the offending record, so a user can find and fix it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from engine.errors import DataError

REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "preference": ("prompt", "chosen", "rejected"),
    "prompts": ("prompt",),
    "sft": ("prompt", "response"),
}
OPTIONAL_COLUMNS: dict[str, tuple[str, ...]] = {
    "preference": ("margin",),
    "prompts": ("ground_truth", "data_source", "environment"),
    "sft": (),
}
TRUNCATIONS = ("error", "left", "right", "middle")
_PARQUET_MAGIC = b"PAR1"
_READ_BATCH_ROWS = 1024
"""Rows per streamed parquet batch: bounded memory whatever the file size."""


# --- reading and checking rows -------------------------------------------------------------------

def iter_rows(path: str, kind: str) -> Iterator[dict[str, Any]]:
    """Yield checked rows of a parquet or JSON Lines file, in file order.

    Each row holds the kind's required columns and those optional columns present in the file
    (other columns are dropped). `prompt` is a string or a list of chat messages
    (`{"role": str, "content": str}`); `margin` a finite number (null -> 0.0); `ground_truth` a
    string or an integer (given as a string); `data_source` a string or null.

    Raises:
        DataError: unknown kind, unreadable file, missing/mistyped/null cell (param = column,
            data = {"row": i}), or a file without rows.
    """
    if kind not in REQUIRED_COLUMNS:
        raise DataError(f"unknown dataset kind {kind!r}; expected one of {sorted(REQUIRED_COLUMNS)}",
                        param="kind")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror}", param="file") from e
    records = _parquet_records(path, kind) if magic == _PARQUET_MAGIC else _jsonl_records(path)
    n = 0
    for n, record in enumerate(records, start=1):
        yield _check_row(record, kind, n - 1)
    if n == 0:
        raise DataError(f"{path} has no rows", param="file", data={"row": 0})


def load_rows(path: str, kind: str) -> list[dict[str, Any]]:
    """All rows of `iter_rows` as a list (fine for datasets that fit in memory)."""
    return list(iter_rows(path, kind))


def _parquet_records(path: str, kind: str) -> Iterator[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"corrupt parquet file: {e}", param="file", data={"row": 0}) from e
    names = set(pf.schema_arrow.names)
    for column in REQUIRED_COLUMNS[kind]:
        if column not in names:
            raise DataError(f"missing column {column!r} (file has {sorted(names)})",
                            param=column, data={"row": 0})
    wanted = [c for c in REQUIRED_COLUMNS[kind] + OPTIONAL_COLUMNS[kind] if c in names]
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=_READ_BATCH_ROWS, columns=wanted):
            yield from batch.to_pylist()
            row += batch.num_rows
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"corrupt parquet file near row {row}: {e}", param="file", data={"row": row}) from e


def _jsonl_records(path: str) -> Iterator[dict[str, Any]]:
    row = 0
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if not raw.strip():
                continue  # blank lines (a trailing newline) are not records
            try:
                record = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                what = "not parquet nor JSON Lines" if row == 0 else "invalid JSON"
                raise DataError(f"{what}: line {line_no}: {e}", param="file",
                                data={"row": row, "line": line_no}) from e
            if not isinstance(record, dict):
                raise DataError(f"line {line_no} is not a JSON object", param="file",
                                data={"row": row, "line": line_no})
            yield record
            row += 1


def _bad(column: str, row: int, message: str) -> DataError:
    return DataError(f"row {row}, column {column!r}: {message}", param=column, data={"row": row})


def _check_row(record: dict[str, Any], kind: str, row: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column in REQUIRED_COLUMNS[kind]:
        if column not in record:
            raise _bad(column, row, "missing")
        value = record[column]
        if value is None:
            raise _bad(column, row, "null")
        out[column] = _check_prompt(value, row) if column == "prompt" else _check_text(column, value, row)
    for column in OPTIONAL_COLUMNS[kind]:
        if column not in record:
            continue
        value = record[column]
        if column == "margin":
            if value is None:
                value = 0.0
            elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise _bad(column, row, f"must be a finite number, got {value!r}")
            out[column] = float(value)
        elif column == "environment":
            out[column] = _check_environment(value, row)
        elif column == "ground_truth":
            if isinstance(value, int) and not isinstance(value, bool):
                value = str(value)
            if value is not None and not isinstance(value, str):
                raise _bad(column, row, f"must be a string or an integer, got {type(value).__name__}")
            out[column] = value
        else:
            if value is not None and not isinstance(value, str):
                raise _bad(column, row, f"must be a string, got {type(value).__name__}")
            out[column] = value
    return out


def _check_environment(value: Any, row: int) -> dict[str, Any] | None:
    """A row's episode environment (multi-turn PPO): a JSON object with a string `type`, given as an
    object or as its JSON text; null (or an empty string) leaves the row to the job's environment."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise _bad("environment", row, f"not valid JSON: {e.msg}") from e
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise _bad("environment", row, "must be a JSON object with a string `type`")
    return value


def _check_text(column: str, value: Any, row: int) -> str:
    if not isinstance(value, str):
        raise _bad(column, row, f"must be a string, got {type(value).__name__}")
    return value


def _check_prompt(value: Any, row: int) -> str | list[dict[str, str]]:
    """A prompt is a string or a non-empty list of chat messages (VERL's parquet layout)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in value):
        return [{"role": m["role"], "content": m["content"]} for m in value]
    raise _bad("prompt", row, "must be a string or a list of {role, content} messages, "
               f"got {type(value).__name__}")


# --- tokenizing ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class PairExample:
    """A preference pair; both sequences are prompt + response + EOS."""

    chosen_ids: list[int]
    rejected_ids: list[int]
    margin: float = 0.0
    chosen_prompt_len: int = 0
    """Leading tokens of `chosen_ids` that are prompt (after truncation); the rest is response."""
    rejected_prompt_len: int = 0


@dataclass(frozen=True)
class SFTExample:
    """Prompt + response + EOS; the loss covers `input_ids[prompt_len:]`."""

    input_ids: list[int]
    prompt_len: int


@dataclass(frozen=True)
class PromptExample:
    """A prompt to sample from, with what a rule reward needs."""

    prompt_ids: list[int]
    ground_truth: str | None
    data_source: str | None
    text: str
    """The prompt as written (for a chat list: the last user message)."""
    conversation: str | list[dict[str, str]] = ""
    """The whole prompt as given (a chat list keeps its system and earlier turns): what a reward model
    with another vocabulary re-tokenizes."""
    environment: dict[str, Any] | None = None
    """Multi-turn PPO: the episode's environment spec (the row's `environment` column, else the job's)."""


def prompt_token_ids(tokenizer: Any, prompt: str | list[dict[str, str]]) -> list[int]:
    """Token ids of a prompt, ready for the response to follow.

    With a chat template: the rendered conversation with the generation prompt, tokenized without
    extra special tokens (the template writes its own BOS). Without one: the text (messages joined
    by newlines) tokenized with the tokenizer's special tokens (e.g. BOS).
    """
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in messages)
    return list(tokenizer(text, add_special_tokens=True)["input_ids"])


def response_token_ids(tokenizer: Any, response: str) -> list[int]:
    """Token ids of a response with EOS appended (the policy must learn to stop)."""
    return list(tokenizer(response, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]


def _prompt_text(prompt: str | list[dict[str, str]]) -> str:
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if m["role"] == "user"]
    return users[-1] if users else prompt[-1]["content"]


def _check_truncation(truncation: str) -> None:
    if truncation not in TRUNCATIONS:
        raise DataError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}", param="truncation")


def _cut(ids: list[int], limit: int, truncation: str) -> list[int]:
    """`ids` cut to `limit` tokens: `left` keeps the end (nearest the response), `right` the start,
    `middle` both ends (the start's half rounded down)."""
    if len(ids) <= limit:
        return ids
    if truncation == "left":
        return ids[len(ids) - limit:] if limit else []
    if truncation == "middle":
        head = limit // 2
        return ids[:head] + (ids[len(ids) - (limit - head):] if limit - head else [])
    return ids[:limit]


def _fit_prompt(ids: list[int], limit: int, truncation: str, row: int) -> list[int]:
    """Apply the truncation policy to a prompt (`_cut`); `error` refuses a long one."""
    if len(ids) <= limit:
        return ids
    if truncation == "error":
        raise DataError(f"row {row}: prompt has {len(ids)} tokens, more than max_prompt_length={limit}",
                        param="prompt", data={"row": row, "length": len(ids), "max": limit})
    return _cut(ids, limit, truncation)


def _fit_response(ids: list[int], limit: int, truncation: str, row: int, column: str = "response") -> list[int]:
    """Responses are always cut at the end (they must start where the prompt stops)."""
    if len(ids) <= limit:
        return ids
    if truncation == "error":
        raise DataError(f"row {row}: {column} has {len(ids)} tokens, more than the limit {limit}",
                        param=column, data={"row": row, "length": len(ids), "max": limit})
    return ids[:limit]


def _kept(rows: Iterable[dict[str, Any]], tokenizer: Any, max_prompt_length: int, filter_overlong_prompts: bool
          ) -> Iterator[tuple[int, dict[str, Any], list[int]]]:
    """(row index, row, prompt ids) of the rows that stay: with `filter_overlong_prompts` (VERL's
    name), rows whose prompt is longer than `max_prompt_length` are dropped before any truncation.
    A file that loses every row is an error (nothing would train)."""
    seen = kept = 0
    for i, r in enumerate(rows):
        seen += 1
        prompt = prompt_token_ids(tokenizer, r["prompt"])
        if filter_overlong_prompts and len(prompt) > max_prompt_length:
            continue
        kept += 1
        yield i, r, prompt
    if seen and not kept:
        raise DataError(f"filter_overlong_prompts dropped all {seen} rows: every prompt is longer than "
                        f"max_prompt_length={max_prompt_length}", param="max_prompt_length",
                        data={"row": 0, "max": max_prompt_length})


def filter_key(data: Any) -> dict[str, int]:
    """What filtering adds to a cache key of tokenized pairs (nothing when it is off, so keys written
    before the option existed still match)."""
    return {"filter_overlong_prompts": data.max_prompt_length} if data.filter_overlong_prompts else {}


def tokenize_sft(rows: Iterable[dict[str, Any]], tokenizer: Any, max_prompt_length: int,
                 max_response_length: int, truncation: str, *, max_length: int | None = None,
                 filter_overlong_prompts: bool = False) -> list[SFTExample]:
    """`sft` rows -> prompt ids (<= max_prompt_length) + response ids + EOS (<= max_response_length),
    the whole <= `max_length` (None: the sum of the two).

    Truncation: the prompt by the policy (`_cut`), the response always on the right, first to
    `max_response_length`, then so that prompt + response fits `max_length` (a prompt is cut to
    leave at least one response token). `error` refuses any of these overflows.
    """
    _check_truncation(truncation)
    total = max_length or (max_prompt_length + max_response_length)
    out = []
    for i, r, prompt in _kept(rows, tokenizer, max_prompt_length, filter_overlong_prompts):
        prompt = _fit_prompt(prompt, max_prompt_length, truncation, i)
        response = _fit_response(response_token_ids(tokenizer, r["response"]), max_response_length, truncation, i)
        if len(prompt) + len(response) > total:
            if truncation == "error":
                n = len(prompt) + len(response)
                raise DataError(f"row {i}: prompt + response has {n} tokens, more than max_length={total}",
                                param="response", data={"row": i, "length": n, "max": total})
            prompt = _cut(prompt, max(total - 1, 0), truncation)
            response = response[:total - len(prompt)]
        out.append(SFTExample(input_ids=prompt + response, prompt_len=len(prompt)))
    return out


def tokenize_prompts(rows: Iterable[dict[str, Any]], tokenizer: Any, max_prompt_length: int,
                     truncation: str, *, filter_overlong_prompts: bool = False,
                     environment: dict[str, Any] | None = None) -> list[PromptExample]:
    """`prompts` rows -> prompt ids (chat template with generation prompt when the tokenizer has one);
    `environment`: the job's episode environment, for rows without one of their own."""
    _check_truncation(truncation)
    return [PromptExample(
        prompt_ids=_fit_prompt(prompt, max_prompt_length, truncation, i),
        ground_truth=r.get("ground_truth"), data_source=r.get("data_source"), text=_prompt_text(r["prompt"]),
        conversation=r["prompt"], environment=r.get("environment") or environment,
    ) for i, r, prompt in _kept(rows, tokenizer, max_prompt_length, filter_overlong_prompts)]


def tokenize_preference(rows: Iterable[dict[str, Any]], tokenizer: Any, max_length: int,
                        truncation: str, *, max_prompt_length: int | None = None,
                        filter_overlong_prompts: bool = False) -> list[PairExample]:
    """`preference` rows -> (prompt + chosen + EOS, prompt + rejected + EOS), each <= max_length.

    Truncation: `error` refuses a long pair (param = the longer column); `left` and `middle` cut the
    response's end only if the response alone is longer than `max_length`, then cut the prompt to
    the room left (`left` keeps its end, `middle` both ends); `right` cuts the sequence end (the
    prompt stays whole when it fits). `filter_overlong_prompts` first drops pairs whose prompt is
    longer than `max_prompt_length`.
    """
    _check_truncation(truncation)
    if filter_overlong_prompts and max_prompt_length is None:
        raise ValueError("filter_overlong_prompts needs max_prompt_length")
    out = []
    for i, r, prompt in _kept(rows, tokenizer, max_prompt_length or 0, filter_overlong_prompts):
        pair, prompt_lens = [], []
        for column in ("chosen", "rejected"):
            response = response_token_ids(tokenizer, r[column])
            total = len(prompt) + len(response)
            if total > max_length:
                if truncation == "error":
                    raise DataError(
                        f"row {i}: prompt + {column} has {total} tokens, more than max_length={max_length}",
                        param=column, data={"row": i, "length": total, "max": max_length})
                if truncation in ("left", "middle"):
                    response = response[:max_length]
                    kept = _cut(prompt, max_length - len(response), truncation)
                    ids = kept + response
                    prompt_lens.append(len(kept))
                else:
                    ids = (prompt + response)[:max_length]
                    prompt_lens.append(min(len(prompt), max_length))
            else:
                ids = prompt + response
                prompt_lens.append(len(prompt))
            pair.append(ids)
        out.append(PairExample(chosen_ids=pair[0], rejected_ids=pair[1], margin=float(r.get("margin", 0.0)),
                               chosen_prompt_len=prompt_lens[0], rejected_prompt_len=prompt_lens[1]))
    return out


# --- batching ------------------------------------------------------------------------------------

def pad(seqs: Sequence[Sequence[int]], pad_id: int, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token id lists to one length.

    Returns:
        `(input_ids, attention_mask)`, both `(batch, max_len)` LongTensors; mask 1 on real tokens.
    """
    if not seqs:
        raise ValueError("pad needs at least one sequence")
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if not s:
            continue
        cols = slice(0, len(s)) if side == "right" else slice(width - len(s), width)
        input_ids[i, cols] = torch.as_tensor(list(s), dtype=torch.long)
        attention_mask[i, cols] = 1
    return input_ids, attention_mask


def token_budget_batches(lengths: Sequence[int], max_tokens: int, window: int | None = None) -> list[list[int]]:
    """Group indices into micro-batches whose padded size (`len(batch) * longest`) is <= `max_tokens`.

    Indices are sorted by length inside each window of `window` consecutive indices (None: the whole
    list), so similar lengths share a micro-batch and padding stays low, while a caller's shuffle
    still decides which rows meet in a window. Greedy packing in sorted order; a sequence longer
    than `max_tokens` gets a micro-batch of its own. Every index appears exactly once.

    Returns:
        Lists of indices into `lengths`.
    """
    if max_tokens <= 0:
        raise ValueError("max_tokens must be positive")
    n = len(lengths)
    step = n if window is None else window
    if step <= 0 and n:
        raise ValueError("window must be positive")
    batches: list[list[int]] = []
    for start in range(0, n, max(step, 1)):
        # Longest first: the first member fixes the width, later ones only fill rows.
        order = sorted(range(start, min(start + step, n)), key=lambda i: (-lengths[i], i))
        current: list[int] = []
        width = 0
        for i in order:
            new_width = max(width, lengths[i])
            if current and (len(current) + 1) * new_width > max_tokens:
                batches.append(current)
                current, new_width = [], lengths[i]
            current.append(i)
            width = new_width
        if current:
            batches.append(current)
    return batches


def padding_efficiency(batches: Sequence[Sequence[int]], lengths: Sequence[int]) -> float:
    """Real tokens / computed tokens (`len(batch) * longest` summed over batches); 1.0 = no padding."""
    computed = sum(len(b) * max(lengths[i] for i in b) for b in batches if b)
    real = sum(lengths[i] for b in batches for i in b)
    return real / computed if computed else 1.0


def length_groups(lengths: Sequence[int], overhead: int = 128) -> list[list[int]]:
    """Split indices into groups, each to be padded and run as its own forward pass, minimising the
    computed tokens `sum(len(group) * longest_in_group + overhead)`.

    The indices are sorted by length and cut into contiguous runs by an exact dynamic programme
    (`overhead` is the fixed cost of one more forward, in tokens). Cuts fall only between different
    lengths, and each step is vectorised, so a few hundred sequences cost well under a millisecond.

    Returns:
        Lists of indices into `lengths`, shortest group first; every index appears exactly once.
    """
    n = len(lengths)
    if n == 0:
        return []
    order = sorted(range(n), key=lambda i: (lengths[i], i))
    sorted_len = np.asarray([lengths[i] for i in order], dtype=np.float64)
    # Candidate cut points: 0, n, and every position where the (sorted) length changes.
    cuts = np.concatenate(([0], np.flatnonzero(np.diff(sorted_len)) + 1, [n]))
    best = np.zeros(len(cuts))
    back = np.zeros(len(cuts), dtype=np.int64)
    for j in range(1, len(cuts)):
        # Group cuts[i]..cuts[j]-1 is padded to its longest member, sorted_len[cuts[j] - 1].
        cost = best[:j] + (cuts[j] - cuts[:j]) * sorted_len[cuts[j] - 1] + overhead
        back[j] = int(np.argmin(cost))
        best[j] = cost[back[j]]
    groups: list[list[int]] = []
    j = len(cuts) - 1
    while j > 0:
        i = int(back[j])
        groups.append(order[cuts[i]:cuts[j]])
        j = i
    return groups[::-1]
