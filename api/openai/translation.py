"""An OpenAI fine-tuning request translated into Keel's job: the training file converted to Keel's
layout (a derived file, deduplicated by content) and the OpenAI method, with its `auto` values
resolved, turned into a Keel method (`supervised` -> `sft`, `dpo` -> `dpo`, `reinforcement` -> `ppo`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from api import model_refs
from api.errors import ApiError, not_found
from api.graders import checked_grader
from api.openai import agentic
from api.openai.schemas import DpoSpec, FineTuningJobCreate, SupervisedSpec
from api.schemas.jobs import MAX_GRADER_CHARS
from core import finetune_files as ft
from core.dataset_rules import DatasetError
from core.datasets import inspect_dataset
from core.ids import new_id
from core.models import File
from core.storage import get_storage

_KIND = {"supervised": "chat", "dpo": "preference", "reinforcement": "reinforcement"}
"""The file layout each OpenAI method trains on."""
_KEEL_METHOD = {"supervised": "sft", "dpo": "dpo", "reinforcement": "ppo"}
BASE_LR = {"supervised": 1e-5, "dpo": 1e-6, "reinforcement": 1e-6}
"""`learning_rate_multiplier` multiplies these (Keel's default learning rates of the methods)."""
DEFAULT_EPOCHS = {"supervised": 3, "dpo": 3, "reinforcement": 1}
DEFAULT_BATCH = 8
HOLDOUT_FRACTION = 0.1
"""engine.methods.supervised.HOLDOUT_FRACTION (the API cannot import the engine; a test keeps them equal): the share
of the training rows a supervised or DPO job without a validation file holds out."""
DEFAULT_BETA = 0.1
_MAX_GRADER_CHARS = MAX_GRADER_CHARS


def _bad(param: str, message: str, code: str = "invalid_request") -> ApiError:
    return ApiError(400, code, f"{param}: {message}", param=param)


# -- files: OpenAI layouts -> Keel's ----------------------------------------------------------------

def _derived_file(db: Session, project_id: str, file_id: str, method: str, param: str) -> tuple[File, File]:
    """(the given file, the Keel-format file the job trains on)."""
    source = db.get(File, file_id)
    if source is None or source.project_id != project_id or source.deleted_at is not None:
        raise not_found("file", file_id, param=param)
    want_keel = ft.KEEL_PURPOSE[_KIND[method]]
    if source.purpose == want_keel:  # already in Keel's layout
        return source, source
    if source.purpose != ft.FINE_TUNE:
        raise _bad(param, f"{file_id} has purpose {source.purpose!r}; upload it with purpose 'fine-tune'.",
                   "invalid_file_purpose")
    storage = get_storage()
    try:
        with storage.open(source.storage_key) as f:
            kind, data = ft.convert(f)
    except ft.FormatError as e:
        raise _bad(param, f"{file_id}: {e.detail}", "invalid_file_format") from e
    if kind != _KIND[method]:
        raise _bad(param, f"{file_id} holds {kind} rows; a {method} job needs {_KIND[method]} rows "
                   "(docs/openai.md).", "invalid_file_format")
    sha = hashlib.sha256(data).hexdigest()
    existing = db.scalar(select(File).where(File.project_id == project_id, File.purpose == want_keel,
                                            File.sha256 == sha, File.deleted_at.is_(None)))
    if existing is not None:
        return source, existing
    derived_id = new_id("file")
    key = f"files/{project_id}/{derived_id}"
    with storage.writer(key) as out:
        out.write(data)
    try:
        with storage.open(key) as f:
            info = inspect_dataset(f, want_keel)
    except DatasetError as e:
        storage.delete(key)
        raise _bad(param, f"{file_id}: {e.detail}", "invalid_file_format") from e
    row = File(id=derived_id, project_id=project_id, purpose=want_keel, filename=f"{source.filename}.keel.jsonl"[:255],
               bytes=len(data), sha256=sha, format="jsonl", rows=info.rows, columns=info.columns, stats=info.stats,
               status="processed", storage_key=key,
               meta={"converted_from": source.id, agentic.ROWS_KEY: agentic.count_environments(data)})
    db.add(row)
    db.flush()
    return source, row


# -- OpenAI method -> Keel method --------------------------------------------------------------------

def _auto(value: Any, default: Any) -> Any:
    return default if value == "auto" else value


def _lengths(db: Session, model: str, method: str) -> dict[str, Any]:
    """Data lengths from the model's context window (Keel's defaults when it is unknown)."""
    window = model_refs.context_window_of(db, model)
    if window is None:
        return {}
    if method == "dpo":
        return {"max_length": min(window, 3072), "truncation": "left"}
    prompt = min(1024, window // 2)
    response = min(2048 if method == "supervised" else 512, window - prompt)
    return {"max_prompt_length": prompt, "max_response_length": response, "truncation": "left"}


def trained_rows(rows: int, kind: str, validation: bool) -> int:
    """Rows an epoch trains on: without a validation file, supervised and DPO jobs hold out
    `HOLDOUT_FRACTION` of them (at least one, from two rows), as `engine.methods.supervised.split_rows` does."""
    if validation or kind == "reinforcement" or rows < 2:
        return rows
    return rows - max(1, int(rows * HOLDOUT_FRACTION))


def _keel_method(db: Session, body: FineTuningJobCreate, source: File, training: File,
                 validation: File | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Keel method, OpenAI method with the resolved hyperparameters)."""
    method = body.method
    kind = method.type
    spec = getattr(method, kind)
    if spec is None:
        if kind == "reinforcement":
            raise _bad("method.reinforcement", "required for a reinforcement job (it holds the grader)")
        spec = SupervisedSpec() if kind == "supervised" else DpoSpec()
        if kind == "supervised" and body.hyperparameters is not None:
            spec.hyperparameters = body.hyperparameters
    hp = spec.hyperparameters
    # Epoch ends as the engine counts them: the rows left after the hold-out, whole batches only.
    rows = trained_rows(max(1, training.rows or 1), kind, body.validation_file is not None)
    epochs = _auto(hp.n_epochs, DEFAULT_EPOCHS[kind])
    batch = _auto(hp.batch_size, min(DEFAULT_BATCH, rows))
    multiplier = _auto(hp.learning_rate_multiplier, 1.0)
    lr = BASE_LR[kind] * multiplier
    steps_per_epoch = max(1, rows // batch)
    resolved: dict[str, Any] = {"n_epochs": epochs, "batch_size": batch, "learning_rate_multiplier": multiplier}
    data = {"train_batch_size": batch, **_lengths(db, body.model, kind)}
    trainer = {"total_epochs": epochs, "save_freq": steps_per_epoch, "test_freq": steps_per_epoch}
    # A batch of one (a two-row file less its hold-out) takes micro-batches of one too.
    micro = {"micro_batch_size_per_gpu": batch} if batch < 2 else {}
    extra: dict[str, Any] = {}  # Keel's method fields beyond the hyperparameters (a reinforcement job's environment)
    if kind == "supervised":
        hyper = {"data": data, "optim": {"lr": lr}, "trainer": trainer, **micro}
        keel: dict[str, Any] = {"type": "sft", "hyperparameters": hyper}
    elif kind == "dpo":
        beta = _auto(hp.beta, DEFAULT_BETA)
        resolved["beta"] = beta
        keel = {"type": "dpo", "hyperparameters": {"data": data, "optim": {"lr": lr}, "trainer": trainer,
                                                   "beta": beta, **micro}}
    else:
        grader, validated = checked_grader(db, source.project_id, spec.grader, "method.reinforcement.grader")
        _check_item_fields(validated, source)
        text = json.dumps(grader, separators=(",", ":"), sort_keys=True)
        if len(text) > _MAX_GRADER_CHARS:
            raise _bad("method.reinforcement.grader", f"at most {_MAX_GRADER_CHARS} characters as JSON")
        compute = _auto(hp.compute_multiplier, 1.0)
        group = max(2, round(4 * compute))
        interval = _auto(hp.eval_interval, steps_per_epoch)
        resolved.update(compute_multiplier=compute, eval_interval=interval,
                        eval_samples=_auto(hp.eval_samples, 1), reasoning_effort=hp.reasoning_effort)
        trainer["test_freq"] = interval
        rollout: dict[str, Any] = {"n": group}
        episodes, extra = agentic.multi_turn(spec, training, rows, validation)
        if episodes is not None:  # rows with tools (or an environment): multi-turn episodes
            rollout["multi_turn"] = resolved["multi_turn"] = episodes
        keel = {"type": "ppo", "reward": {"function": "grader", "options": {"grader": text}}, **extra,
                "hyperparameters": {
                    "data": data, "algorithm": {"adv_estimator": "grpo"}, "rollout": rollout,
                    "actor": {"ppo_mini_batch_size": batch, "ppo_epochs": 1, "optim": {"lr": lr}},
                    "trainer": trainer}}
    keel["overrides"] = list(method.keel_overrides)
    public = {"type": kind, kind: {**({"grader": spec.grader} if kind == "reinforcement" else {}),
                                   **extra, "hyperparameters": resolved}}
    return keel, public


def _check_item_fields(validated: dict[str, Any], source: File) -> None:
    """Every `{{item.<field>}}` must be a field of every training row. The derived prompts file holds the
    row as JSON; the reference fields present in every row are the uploaded file's `columns`."""
    fields = set(source.columns or [])
    for field, param in validated.get("item_fields", []):
        if field not in fields:
            param = param.replace("grader", "method.reinforcement.grader", 1)
            raise ApiError(400, "invalid_grader", f"{param}: template field item.{field} is missing from the "
                           f"training file's rows (they have: {', '.join(sorted(fields - {'messages'})) or 'none'}).",
                           param=param)
