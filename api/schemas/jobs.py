"""Jobs, their events and metrics, checkpoints and models: request and response schemas."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.pagination import Page
from api.schemas.environments import EnvironmentSpec
from api.schemas.forks import ForkedFrom
from api.schemas.hyperparameters import (
    MAX_OVERRIDES,
    DistillPolicyConfig,
    DPOConfig,
    EvalConfig,
    JobResources,
    PPOConfig,
    Resources,
    RewardModelConfig,
    RMDistillConfig,
    SFTConfig,
    Strict,
    apply_overrides,
    errors_at,
)

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelling", "cancelled", "pausing", "paused"]
"""`pausing`: asked to pause, saving its checkpoint; `paused`: stopped, holding no resources, until resumed."""
TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
EventType = Literal["job.status", "job.metrics", "job.checkpoint", "job.log", "job.warning", "job.error", "job.done",
                    "job.placement", "job.samples"]
MAX_GRADER_CHARS = 512 * 1024
"""A grader as JSON (`options.grader`, OpenAI's `method.reinforcement.grader`): room for a 256 KiB python source."""
RewardFunction = Literal["gsm8k", "exact_match", "regex", "length_penalty", "data_source", "grader", "code_tests"]
"""`grader`: an OpenAI grader, JSON in `options.grader` (engine/rewards/graders.py; docs/openai.md). `code_tests`:
the response's code against the row's tests, in the sandbox (docs/rewards.md)."""

FILE_PURPOSE = {"sft": "sft", "reward_model": "preference", "rm_distill": "preference", "dpo": "preference",
                "ppo": "prompts", "distill_policy": "prompts", "eval": "prompts"}
"""The dataset purpose each method trains on."""

ModelRef = Annotated[str, Field(min_length=1, max_length=500, description=(
    "A Keel model id (`model-...`) or checkpoint id (`ckpt-...`: its Hugging Face export) of this project, "
    "a hub id (`org/name`), or an absolute directory under one of the deployment's model roots."), examples=["Qwen/Qwen2.5-0.5B-Instruct"])]
ResourceId = Annotated[str, Field(min_length=1, max_length=64)]
_OVERRIDE_MAX = 1000
Override = Annotated[str, Field(min_length=3, max_length=_OVERRIDE_MAX,
                                pattern=r"^\s*\+?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\s*=",
                                examples=["actor_rollout_ref.actor.ppo_epochs=4"])]
"""`section.key=value` (the key as `hyperparameters.apply_overrides` reads it)."""


class _Method(Strict):
    overrides: list[Override] = Field(default_factory=list, max_length=MAX_OVERRIDES, description=(
        "VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`), applied over `hyperparameters` "
        "(the `actor_rollout_ref.` prefix is dropped; values are JSON or YAML scalars). Always empty in "
        "responses: `hyperparameters` shows the result."))

    @model_validator(mode="before")
    @classmethod
    def _apply_overrides(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("overrides"):
            return data
        overrides, hyperparameters = data["overrides"], data.get("hyperparameters", {})
        if not (isinstance(overrides, list) and all(isinstance(o, str) and len(o) <= _OVERRIDE_MAX for o in overrides)
                and isinstance(hyperparameters, dict) and len(overrides) <= MAX_OVERRIDES):
            return data  # the field validators say what is wrong
        return {**data, "hyperparameters": apply_overrides(hyperparameters, overrides), "overrides": []}


class SFTMethod(_Method):
    """Supervised fine-tuning on `prompt`/`response` rows (file purpose `sft`)."""

    type: Literal["sft"]
    hyperparameters: SFTConfig = Field(default_factory=SFTConfig)


class RewardModelMethod(_Method):
    """A Bradley-Terry reward model trained on preference pairs (file purpose `preference`)."""

    type: Literal["reward_model"]
    hyperparameters: RewardModelConfig = Field(default_factory=RewardModelConfig)


class RMDistillMethod(_Method):
    """Distil a teacher reward model into the (smaller, LoRA) `model` on preference pairs."""

    type: Literal["rm_distill"]
    teacher: ModelRef
    """The teacher reward model."""
    hyperparameters: RMDistillConfig = Field(default_factory=RMDistillConfig)


class DPOMethod(_Method):
    """Offline preference optimisation of the policy `model` on preference pairs (file purpose
    `preference`): DPO, conservative DPO (`label_smoothing`) or IPO (`loss_type: ipo`); the reference is
    `model` itself, frozen. The output is a policy."""

    type: Literal["dpo"]
    hyperparameters: DPOConfig = Field(default_factory=DPOConfig)


class RewardSpec(Strict):
    """PPO's reward: a reward model, or a rule function for verifiable tasks. Exactly one of the two."""

    model: ModelRef | None = None
    """A reward model (Keel model id of kind `reward_model`, hub id or directory)."""
    function: RewardFunction | None = None
    """A built-in rule reward; `data_source` picks one per row from the dataset's `data_source` column."""
    options: dict[Annotated[str, Field(max_length=64)],
                  Annotated[str, Field(max_length=MAX_GRADER_CHARS)] | int | float | bool] = (
        Field(default_factory=dict, max_length=32))
    """Keyword options of the rule function (e.g. `{"pattern": "..."}` for `regex`). Strings are at most
    4096 characters, except `grader`: the `grader` function's grader object as a JSON string (required by
    that function; a python grader's source may be 256 KiB)."""

    @model_validator(mode="after")
    def _exactly_one(self):
        if (self.model is None) == (self.function is None):
            raise ValueError("set exactly one of `model` and `function`")
        if self.model is not None and self.options:
            raise ValueError("`options` apply to a reward function only")
        for key, value in self.options.items():
            if isinstance(value, str) and len(value) > 4096 and key != "grader":
                raise ValueError(f"options.{key}: at most 4096 characters")
        return self


class PPOMethod(_Method):
    """PPO on prompts (file purpose `prompts`) against a reward model or a rule reward, or, with
    `hyperparameters.rollout.source: trajectories`, on the project's recorded and scored agent calls
    (no `reward`: each trajectory's posted reward; docs/trajectories.md)."""

    type: Literal["ppo"]
    reward: RewardSpec | None = None
    """Required with `rollout.source: generate`; refused with `trajectories` (the posted rewards score them)."""
    environment: EnvironmentSpec | None = None
    """With `hyperparameters.rollout.multi_turn.enable`: every prompt's episode environment (a row's
    `environment` column overrides it; docs/agentic-rl.md)."""
    hyperparameters: PPOConfig = Field(default_factory=PPOConfig)

    @model_validator(mode="after")
    def _reward_by_source(self):
        recorded = self.hyperparameters.rollout.source == "trajectories"
        if recorded == (self.reward is not None):
            raise errors_at("PPOMethod", (("reward",), None, "rollout.source trajectories trains on the posted "
                                          "rewards: leave reward out" if recorded else "a reward is required"))
        return self


class DistillPolicyMethod(_Method):
    """On-policy distillation on prompts (file purpose `prompts`): the student (`model`) samples, the
    `teacher` scores each sampled token, and the student trains on the reverse KL to the teacher as a
    per-token reward (optionally plus `reward`, weighted by `distill.task_reward_weight`) with PPO's
    machinery. The teacher must use the student's tokenizer."""

    type: Literal["distill_policy"]
    teacher: ModelRef
    """The teacher policy (any size the cluster fits)."""
    reward: RewardSpec | None = None
    """A task reward mixed in when `distill.task_reward_weight` > 0."""
    hyperparameters: DistillPolicyConfig = Field(default_factory=DistillPolicyConfig)

    @model_validator(mode="after")
    def _task_reward(self):
        if self.hyperparameters.distill.task_reward_weight > 0 and self.reward is None:
            raise errors_at("DistillPolicyMethod", (("reward",), None,
                            "distill.task_reward_weight > 0 needs a task reward (method.reward)"))
        return self


class EvalMethod(_Method):
    """Evaluate `model` on prompts (file purpose `prompts`): sample `rollout.n` responses per prompt and
    score them with `reward`. Reports `eval/reward/mean`, pass@k (rule rewards) and, with `compare_to`,
    the win rate against that model; writes an `eval_results` file (`result_files`); no output model."""

    type: Literal["eval"]
    reward: RewardSpec
    compare_to: ModelRef | None = None
    """A model whose responses to the same prompts (same sampling) are judged against `model`'s by `reward`:
    `eval/win_rate` (win 1, tie 0.5, loss 0) and its standard error `eval/win_rate_se`."""
    hyperparameters: EvalConfig = Field(default_factory=EvalConfig)


JobMethod = Annotated[SFTMethod | RewardModelMethod | RMDistillMethod | DPOMethod | PPOMethod
                      | DistillPolicyMethod | EvalMethod, Field(discriminator="type")]

Metadata = Annotated[dict[Annotated[str, Field(min_length=1, max_length=64)], Annotated[str, Field(max_length=512)]],
                     Field(max_length=16, description="Up to 16 string pairs of your own.",
                           examples=[{"team": "align"}])]


_Label = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f]*$")]


class WandbSettings(Strict):
    """Where the W&B run goes. The API key is the project secret `WANDB_API_KEY` (never in the job)."""

    project: _Label
    name: _Label | None = None
    """The run's display name (default: the job id)."""
    entity: _Label | None = None
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=20)


class MLflowSettings(Strict):
    """Where the MLflow run goes. Credentials are the project secrets `MLFLOW_TRACKING_TOKEN` or
    `MLFLOW_TRACKING_USERNAME`/`MLFLOW_TRACKING_PASSWORD`."""

    tracking_uri: Annotated[str, Field(min_length=1, max_length=2000)]
    """http(s) on a public address, or under one of the deployment's `KEEL_MLFLOW_TRACKING_URI_PREFIXES`."""
    experiment: _Label = "keel"


class Integration(Strict):
    """An experiment tracker that gets every metric of the job at its step, mirrored by the workers from
    the job's event log (training never waits on it). `tensorboard` writes event files, downloadable at
    `GET /v1/jobs/{job_id}/tensorboard`."""

    type: Literal["wandb", "tensorboard", "mlflow"]
    wandb: WandbSettings | None = None
    """Required for `type: wandb`, and only there."""
    mlflow: MLflowSettings | None = None
    """Required for `type: mlflow`, and only there."""

    @model_validator(mode="after")
    def _settings_match_type(self):
        for kind in ("wandb", "mlflow"):
            if (getattr(self, kind) is None) == (self.type == kind):
                raise ValueError(f"`{kind}` is required when type is {kind}, and allowed only then")
        return self


class JobCreate(Strict):
    """A training job: a base model, a dataset, and a method with its hyperparameters."""

    model: ModelRef
    """The model to train (or, for `rm_distill`, the student)."""
    training_file: ResourceId | None = None
    """A file of this project whose purpose fits the method: sft -> `sft`, reward_model, rm_distill and dpo
    -> `preference`, ppo and eval -> `prompts` (for eval: the prompts evaluated on). Required, except for
    ppo with `rollout.source: trajectories`: left out, the job snapshots the project's scored trajectories
    into a new file (purpose `trajectories`); given, it names such a snapshot to train on again."""
    validation_file: ResourceId | None = None
    """Held-out rows with the same purpose; validation metrics appear as `val/...` (not for eval)."""
    method: JobMethod
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    suffix: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")] | None = None
    """Up to 40 characters added to the output model's name."""
    metadata: Metadata = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    from_checkpoint: ResourceId | None = None
    """A checkpoint (of this project, same method) to continue training from."""
    integrations: list[Integration] = Field(default_factory=list, max_length=3)
    """Experiment trackers to mirror the job's metrics to (at most one of each type)."""

    @model_validator(mode="before")
    @classmethod
    def _method_type(cls, data: Any) -> Any:
        # Name `method.type` itself when it is missing or unknown (the union alone would say `method`).
        method = data.get("method") if isinstance(data, dict) else None
        if isinstance(method, dict) and not (isinstance(method.get("type"), str) and method["type"] in FILE_PURPOSE):
            raise errors_at("JobCreate", (("method", "type"), method.get("type"),
                                          f"must be one of {', '.join(FILE_PURPOSE)}"))
        return data

    @model_validator(mode="after")
    def _training_file_needed(self):
        recorded = isinstance(self.method, PPOMethod) and self.method.hyperparameters.rollout.source == "trajectories"
        if self.training_file is None and not recorded:
            raise errors_at("JobCreate", (("training_file",), None, "Field required"))
        return self

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "model": "Qwen/Qwen2.5-0.5B-Instruct", "training_file": "file-01jb8x6v0c3n7t9r2m4k5q8w1z",
        "method": {"type": "reward_model", "hyperparameters": {
            "data": {"train_batch_size": 16, "max_length": 256}, "optim": {"lr": 1e-4},
            "trainer": {"total_training_steps": 100, "save_freq": 20, "test_freq": 20}}},
        "seed": 0, "metadata": {"team": "align"}}]})


class JobProgress(BaseModel):
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    seconds_remaining: int | None = None
    """Estimated from the pace so far (running jobs only)."""


class JobError(BaseModel):
    code: str
    message: str
    param: str | None = None
    """The hyperparameter or column at fault, when known."""
    error_id: str | None = None
    """Set for system errors, whose details are in the deployment's logs under this id (quote it when
    reporting the problem); the message then stays generic."""


class WorkerPlacement(BaseModel):
    """Where one worker of a job runs (the `job.placement` event of its latest attempt)."""

    role: str
    """`trainer` (sft, reward_model, rm_distill, dpo) or the PPO role: `actor`, `critic`, `ref`, `reward`."""
    rank: int
    node_id: str | None
    """Ray node id (null when the worker ran outside Ray)."""
    node_ip: str
    hostname: str | None = None
    pid: int | None = None


class JobPublic(BaseModel):
    """A job as the API shows it."""

    id: str
    object: Literal["job"] = "job"
    status: JobStatus
    method: JobMethod
    """The method as accepted: every hyperparameter filled in (overrides applied)."""
    model: str
    output_model: str | None
    """The trained model's id, once the job succeeded (eval jobs have none)."""
    result_files: list[str] = Field(default_factory=list)
    """Files the job wrote, once it succeeded (eval: its `eval_results` file, `GET /v1/files/{id}/content`)."""
    training_file: str
    validation_file: str | None
    seed: int
    suffix: str | None
    resources: JobResources
    from_checkpoint: str | None
    forked_from: ForkedFrom | None = None
    """Set on a job made by `POST /v1/jobs/{id}/fork`: the parent job and the checkpoint it started from."""
    created_at: int
    """Unix seconds."""
    started_at: int | None
    finished_at: int | None
    progress: JobProgress
    queue_position: int | None
    """Queued jobs: 1-based position among this project's queued jobs, oldest first; else null."""
    queue_reason: Literal["waiting_for_resources"] | None = None
    """Queued jobs: why the job is not running yet, when Keel knows. `waiting_for_resources`: it fits the
    Ray cluster but not its free CPUs/GPUs right now; it starts when they free up (no attempt spent)."""
    latest_metrics: dict[str, float]
    error: JobError | None
    metadata: dict[str, str]
    attempts: int
    """How many times a worker started the job (more than 1 after a lost worker)."""
    placement: list[WorkerPlacement] | None = None
    """Where the latest attempt's workers run, once they started (see `job.placement`)."""
    created_by: str | None = None
    """The id of the API key that created the job (null for jobs from before keys were recorded)."""
    integrations: list[Integration] = Field(default_factory=list)
    """Experiment trackers the job's metrics are mirrored to."""


class JobsPublic(Page[JobPublic]):
    pass


class JobEventPublic(BaseModel):
    """One entry of a job's event log. `seq` counts from 1 without gaps."""

    object: Literal["job.event"] = "job.event"
    seq: int
    type: EventType
    data: dict[str, Any]
    """job.status `{status}`; job.metrics `{step, values, total_steps, epoch}`; job.checkpoint
    `{checkpoint_id, step, metrics}`; job.log `{message}`; job.warning `{code, message, data}`;
    job.error `{code, message, param?, error_id?}`; job.done `{status}`; job.placement `{workers: [{role, rank, node_id,
    node_ip, hostname, pid}]}` (where each worker of the attempt runs); job.samples `{step, rows: [{prompt,
    response, reward}]}` (a few of a PPO step's rollouts, decoded and size-capped)."""
    created_at: int
    """Unix seconds."""


class JobEventsPublic(BaseModel):
    """Events oldest first; pass `last_seq` as `after` for the next page."""

    object: Literal["list"] = "list"
    data: list[JobEventPublic]
    has_more: bool
    last_seq: int | None


class MetricSeries(BaseModel):
    name: str
    """VERL's namespaced name, e.g. `actor/pg_loss`."""
    steps: list[int]
    values: list[float]
    points: int
    """Points before downsampling (`len(steps)` when none was needed)."""


class JobMetricsPublic(BaseModel):
    """Time series per metric name from the job's `job.metrics` events."""

    object: Literal["job.metrics"] = "job.metrics"
    job_id: str
    data: list[MetricSeries]


class CheckpointPublic(BaseModel):
    id: str
    object: Literal["checkpoint"] = "checkpoint"
    job_id: str
    step: int
    metrics: dict[str, float]
    bytes: int
    created_at: int


class CheckpointsPublic(Page[CheckpointPublic]):
    pass


class CheckpointDeleted(BaseModel):
    id: str
    object: Literal["checkpoint"] = "checkpoint"
    deleted: Literal[True] = True


class ModelDeleted(BaseModel):
    id: str
    object: Literal["model"] = "model"
    deleted: Literal[True] = True


class JobDeleted(BaseModel):
    id: str
    object: Literal["job"] = "job"
    deleted: Literal[True] = True


class ModelPublic(BaseModel):
    """A trained model; usable as `model`, `method.teacher` or `method.reward.model` of later jobs."""

    id: str
    object: Literal["model"] = "model"
    name: str
    kind: Literal["policy", "reward_model", "value_model"]
    format: Literal["hf", "lora"]
    base_model: str
    job_id: str | None
    trainer_id: str | None = None
    """The trainer whose `save_state` / `save_weights_for_sampler` wrote it (docs/trainers.md)."""
    created_at: int
    created: int | None = None
    """`created_at` again, under the name OpenAI's `models.list()` reads."""
    owned_by: str | None = None
    """The project that owns the model (OpenAI's field)."""
    alias_of: str | None = None
    """Set on a model's OpenAI-named entry (`ft:...`, the `fine_tuned_model` of the fine-tuning job that trained
    it): the Keel model id that name stands for. Both ids work wherever a model is referenced."""


class ModelsPublic(Page[ModelPublic]):
    pass
