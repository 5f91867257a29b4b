"""What an uploaded dataset must hold, per purpose: its columns and what each cell may be, the row
limit, and the error every check raises. The column rules mirror engine/data.py, which the API must
not import (it pulls in torch): a file accepted here is one the engine reads. Stricter here: a
required cell may not be empty or whitespace only.

Rows are numbered from 0 (as in engine.data's `DataError.data["row"]`); JSON Lines errors also give
the 1-based line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PURPOSES = ("preference", "prompts", "sft", "fine-tune")
"""Purposes a user may upload (`fine-tune`: OpenAI's JSON Lines layouts, core/finetune_files.py)."""
OUTPUT_PURPOSES = ("eval_results", "fine-tune-results", "trajectories")
"""Purposes of files Keel writes itself (a job's results): listed and downloadable, never uploadable."""
OUTPUT_COLUMNS: dict[str, tuple[str, ...]] = {
    "eval_results": ("prompt_index", "sample_index", "prompt", "ground_truth", "data_source", "response",
                     "response_length", "score", "compare_response", "compare_response_length", "compare_score",
                     "outcome"),
}
"""The columns of each output purpose, in order (engine/methods/evaluate.py writes them; `compare_*` and
`outcome` only for an evaluation with `compare_to`)."""
OUTPUT_COLUMNS["fine-tune-results"] = ("step", "train_loss", "train_accuracy", "valid_loss",
                                       "valid_mean_token_accuracy")
"""A fine-tuning job's step metrics as OpenAI writes them (CSV; api/openai/fine_tuning.py)."""
OUTPUT_COLUMNS["trajectories"] = ("trajectory_id", "group_id", "reward", "calls")
"""A snapshot of scored trajectories a PPO job trains on (api/routes/jobs/trajectories.py)."""
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
KINDS = {"prompt": "prompt", "chosen": "text", "rejected": "text", "response": "text",
         "margin": "number", "ground_truth": "label", "data_source": "tag", "environment": "environment"}
"""prompt: non-empty string or non-empty list of {role, content} messages (VERL's layout);
text: non-empty string; number: finite number or null; label: string, integer or null; tag: string or null;
environment: a multi-turn episode's environment spec, a JSON object with a string `type` (JSON Lines) or its
JSON text (parquet: a string column), or null."""
EXPECTED = {"prompt": "a string (or a list of {role, content} messages)", "text": "a string",
            "number": "a number", "label": "a string or an integer", "tag": "a string",
            "environment": "a JSON object with a string `type` (or its JSON text)"}
MAX_ROWS = 100_000_000
"""More declared rows than this is refused before reading: no real preference set is that big."""
BATCH_ROWS = 4096
"""Rows a reader checks at once."""


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


def bad_cell(column: str, row: int, what: str, line: int | None = None) -> DatasetError:
    where = f"Row {row}" if line is None else f"Row {row} (line {line})"
    return DatasetError("invalid_value", f"{where}, column {column!r}: {what}.", param=column, row=row, line=line)
