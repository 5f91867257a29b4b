"""OpenAI's fine-tuning API shapes (`/v1/fine_tuning/...`): requests as the official `openai` client
sends them, and the objects it parses. `"auto"` hyperparameters resolve to the defaults documented in
docs/openai.md; the job object shows the resolved values."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.environments import EnvironmentSpec
from api.schemas.hyperparameters.ppo import MultiTurnConfig
from api.schemas.jobs import Integration, Metadata, ModelRef, Override, ResourceId
from api.schemas.text import NulFree


class _Strict(NulFree):
    model_config = ConfigDict(extra="forbid")


Auto = Literal["auto"]
Epochs = Annotated[int, Field(ge=1, le=50)]
BatchSize = Annotated[int, Field(ge=1, le=256)]
Multiplier = Annotated[float, Field(gt=0.0, le=100_000.0)]


class SupervisedHyperparameters(_Strict):
    n_epochs: Epochs | Auto = "auto"
    batch_size: BatchSize | Auto = "auto"
    learning_rate_multiplier: Multiplier | Auto = "auto"


class DpoHyperparameters(SupervisedHyperparameters):
    beta: Annotated[float, Field(gt=0.0, le=1e6)] | Auto = "auto"


class ReinforcementHyperparameters(SupervisedHyperparameters):
    compute_multiplier: Annotated[float, Field(gt=0.0, le=64.0)] | Auto = "auto"
    """Scales the group size (samples per prompt): 4 x compute_multiplier, at least 2."""
    eval_interval: Annotated[int, Field(ge=1, le=10**6)] | Auto = "auto"
    eval_samples: Annotated[int, Field(ge=1, le=64)] | Auto = "auto"
    reasoning_effort: Literal["default", "low", "medium", "high"] = "default"
    """Accepted for compatibility; Keel's policies have no reasoning budget."""
    multi_turn: MultiTurnConfig | None = None
    """Keel extension: the episodes' limits, the PPO job's `rollout.multi_turn` (`max_turns`, `max_tool_calls`,
    `max_episode_tokens`, `tool_format`, `max_failed_frac`); `enable` defaults to true where rows carry `tools`
    or `environment` is set (docs/openai.md#agentic-reinforcement-fine-tuning)."""


class SupervisedSpec(_Strict):
    hyperparameters: SupervisedHyperparameters = Field(default_factory=SupervisedHyperparameters)


class DpoSpec(_Strict):
    hyperparameters: DpoHyperparameters = Field(default_factory=DpoHyperparameters)


class ReinforcementSpec(_Strict):
    grader: dict[str, Any]
    """An OpenAI grader object (string_check, text_similarity, multi, score_model, or python when the deployment
    allows it); checked by engine/rewards/graders.py (docs/openai.md#graders)."""
    hyperparameters: ReinforcementHyperparameters = Field(default_factory=ReinforcementHyperparameters)
    response_format: dict[str, Any] | None = None
    environment: EnvironmentSpec | None = None
    """Keel extension: the episodes' environment for rows without `tools` (the PPO job's `method.environment`:
    `{"type": "arithmetic"}`, `{"type": "openenv", "url": ...}`, built-in `tools`; docs/environments.md)."""


class FineTuneMethod(_Strict):
    type: Literal["supervised", "dpo", "reinforcement"]
    supervised: SupervisedSpec | None = None
    dpo: DpoSpec | None = None
    reinforcement: ReinforcementSpec | None = None
    keel_overrides: list[Override] = Field(default_factory=list, max_length=64)
    """Keel extension: VERL-style dotted overrides of the Keel job's hyperparameters
    (`data.max_response_length=16`), applied after the OpenAI hyperparameters are mapped."""


class FineTuningJobCreate(_Strict):
    model: ModelRef
    training_file: ResourceId
    validation_file: ResourceId | None = None
    suffix: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")] | None = None
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    metadata: Metadata | None = None
    integrations: list[Integration] | None = Field(default=None, max_length=3)
    """OpenAI's `{"type": "wandb", "wandb": {"project", "name", "entity", "tags"}}` is Keel's W&B integration
    (the job's metrics are mirrored to the run); Keel's `tensorboard` and `mlflow` work here too."""
    method: FineTuneMethod | None = None
    """Default: supervised with the top-level `hyperparameters` (OpenAI's older shape)."""
    hyperparameters: SupervisedHyperparameters | None = None


class FineTuningError(BaseModel):
    code: str
    message: str
    param: str | None = None


class FineTuningJob(BaseModel):
    """OpenAI's `fine_tuning.job`, over the same row as Keel's job of the same id."""

    id: str
    object: Literal["fine_tuning.job"] = "fine_tuning.job"
    created_at: int
    finished_at: int | None
    error: FineTuningError | None
    fine_tuned_model: str | None
    """`ft:<base>:<project>:<suffix>:<id>` (core/fine_tuned_models.py): usable as `model` of later jobs
    (as is the Keel model id it names, `<id>` with the prefix `model-`) and listed by `GET /v1/models`. A job
    made by Keel's own API (`/v1/jobs`) shows its Keel model id here."""
    hyperparameters: dict[str, Any]
    method: dict[str, Any]
    model: str
    organization_id: str
    result_files: list[str]
    seed: int
    status: Literal["validating_files", "queued", "running", "succeeded", "failed", "cancelled", "paused"]
    trained_tokens: int | None
    training_file: str
    validation_file: str | None
    estimated_finish: int | None
    integrations: list[dict[str, Any]] | None
    metadata: dict[str, str] | None
    suffix: str | None = None
    keel_job: str
    """The same job in Keel's own API (`GET /v1/jobs/{id}`): the id itself."""


class FineTuningJobs(BaseModel):
    object: Literal["list"] = "list"
    data: list[FineTuningJob]
    has_more: bool


class FineTuningJobEvent(BaseModel):
    id: str
    object: Literal["fine_tuning.job.event"] = "fine_tuning.job.event"
    created_at: int
    level: Literal["info", "warn", "error"]
    message: str
    type: Literal["message", "metrics"]
    data: dict[str, Any] | None = None


class FineTuningJobEvents(BaseModel):
    object: Literal["list"] = "list"
    data: list[FineTuningJobEvent]
    has_more: bool


class FineTuningCheckpoint(BaseModel):
    id: str
    object: Literal["fine_tuning.job.checkpoint"] = "fine_tuning.job.checkpoint"
    created_at: int
    fine_tuned_model_checkpoint: str
    fine_tuning_job_id: str
    metrics: dict[str, float | None]
    step_number: int


class FineTuningCheckpoints(BaseModel):
    object: Literal["list"] = "list"
    data: list[FineTuningCheckpoint]
    has_more: bool
    first_id: str | None = None
    last_id: str | None = None


class GraderRun(_Strict):
    grader: dict[str, Any]
    model_sample: str | dict[str, Any]
    item: dict[str, Any] | None = None
    reference_answer: Any = None


class GraderValidate(_Strict):
    grader: dict[str, Any]
