"""Files: uploaded datasets (OpenAI-shaped objects)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.pagination import Page
from core.models import File

FilePurpose = Literal["preference", "prompts", "sft", "fine-tune", "eval_results", "fine-tune-results", "trajectories"]
"""`eval_results` files are written by eval jobs (`JobPublic.result_files`), `fine-tune-results` (a CSV of
step metrics) by fine-tuning jobs (docs/openai.md), `trajectories` (scored agent calls a PPO job trains on)
when such a job is created (docs/trajectories.md); none can be uploaded."""


class ColumnStats(BaseModel):
    """Token-free statistics of one column: character lengths for text, values for numbers."""

    min_chars: int | None = None
    mean_chars: float | None = None
    p95_chars: int | None = Field(default=None, description="Exact below 1024 characters, within 1% above.")
    max_chars: int | None = None
    min: float | None = None
    mean: float | None = None
    max: float | None = None
    nulls: int = 0


class FilePublic(BaseModel):
    """An uploaded dataset, or a job's results (purpose `eval_results`). Uploads are checked: a stored
    file is always `processed`."""

    id: str = Field(examples=["file-01jd6x4m0a9kq3v5w7y8z2b4c6"])
    object: Literal["file"] = "file"
    purpose: FilePurpose
    filename: str = Field(description="The uploaded file's base name (never a path).")
    bytes: int
    sha256: str
    format: Literal["parquet", "jsonl", "csv"]
    rows: int | None
    columns: list[str] = Field(description="The purpose's columns in the file; other columns are ignored.")
    stats: dict[str, ColumnStats]
    status: Literal["processed", "error"] = Field(
        description="`processed` for every stored file: a file that fails its checks is refused with a "
                    "4xx and not stored. `error` is reserved for files found unusable later.")
    status_details: str | None = None
    created_at: int = Field(description="Unix seconds.")
    metadata: dict[str, str]

    @classmethod
    def of(cls, row: File) -> FilePublic:
        return cls(id=row.id, purpose=row.purpose, filename=row.filename, bytes=row.bytes, sha256=row.sha256,
                   format=row.format, rows=row.rows, columns=row.columns, stats=row.stats, status=row.status,
                   status_details=row.status_details, created_at=int(row.created_at.timestamp()),
                   metadata=row.meta)


class FilesPublic(Page[FilePublic]):
    """A page of files, newest first."""


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: Literal[True] = True


class FilePreview(BaseModel):
    """The first rows of a file, with the purpose's columns only."""

    object: Literal["list"] = "list"
    file_id: str
    data: list[dict[str, Any]]


UPLOAD_BODY = {
    "required": True,
    "content": {"multipart/form-data": {"schema": {
        "title": "FileUpload",
        "type": "object",
        "required": ["file", "purpose"],
        "properties": {
            "file": {"type": "string", "format": "binary",
                     "description": "A parquet or JSON Lines file (the format is told by its content)."},
            "purpose": {"type": "string", "enum": ["preference", "prompts", "sft", "fine-tune"],
                        "description": "preference: prompt, chosen, rejected (+ margin); prompts: prompt "
                                       "(+ ground_truth, data_source); sft: prompt, response; fine-tune: "
                                       "OpenAI's fine-tuning JSON Lines (chat, dpo or reinforcement rows, "
                                       "told apart by their fields; errors are 400s)."},
            "metadata": {"type": "string",
                         "description": "A JSON object of up to 16 string pairs (keys up to 64 characters, "
                                        "values up to 512)."},
        },
    }}},
}
"""The multipart body of `upload_file`, written out: the handler parses the stream itself."""
