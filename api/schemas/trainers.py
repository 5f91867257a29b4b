"""Interactive trainers (`/v1/trainers`): request and response schemas.

The primitives take Tinker's names and shapes (docs/trainers.md): a datum is `model_input` (token ids)
plus `loss_fn_inputs` of the same length, position t predicting `target_tokens[t]`. Everything a
schema can check is checked here, before anything is queued: lengths, the inputs each `loss_fn`
needs, pairs for `dpo`, sizes; token ids against the model's vocabulary are checked by the route
(it knows the trainer)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from api.pagination import Page
from api.schemas.hyperparameters import Dtype, Strict, TargetModules, errors_at
from api.schemas.jobs import Metadata, ModelRef

MAX_DATUMS = 1024
"""Datums in one `forward_backward` / `forward` call."""
MAX_TOKENS_PER_DATUM = 32_768
MAX_TOKENS_PER_CALL = 131_072
"""Tokens (`model_input` lengths summed) in one call; bodies are also bound by KEEL_MAX_JSON_BODY_BYTES."""
MAX_PROMPTS = 256
MAX_SAMPLES_PER_CALL = 1024
"""`len(prompts) * num_samples` in one `sample` call."""
MAX_NEW_TOKENS = 4096

TrainerStatus = Literal["active", "idle", "released", "deleted", "failed"]
OperationKind = Literal["forward_backward", "forward", "optim_step", "sample", "save_state", "load_state",
                        "save_weights_for_sampler"]
OperationStatus = Literal["queued", "running", "succeeded", "failed"]
TrainerEventType = Literal["trainer.status", "trainer.operation", "trainer.model", "trainer.warning"]
LossFn = Literal["cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "dpo"]

TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
Tokens = Annotated[list[TokenId], Field(min_length=1, max_length=MAX_TOKENS_PER_DATUM)]
Floats = Annotated[list[float], Field(min_length=1, max_length=MAX_TOKENS_PER_DATUM)]
SaveName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", description=(
    "Up to 64 letters, digits, `.`, `_` or `-`, unique among the trainer's saves."), examples=["step-10"])]
SavedModelId = Annotated[str, Field(pattern=r"^model-[0-9a-z]{1,60}$", description=(
    "The `path` a `save_state` (or, for sampling, `save_weights_for_sampler`) returned: a Keel model id of "
    "this project."), examples=["model-01jb8x3k2m4n5p6q7r8s9t0v1w"])]


# -- creating a trainer ----------------------------------------------------------------------------

class LoraSpec(Strict):
    """Train LoRA adapters instead of every weight."""

    rank: Annotated[int, Field(ge=1, le=1024)] = 32
    alpha: Annotated[int, Field(gt=0, le=100_000)] = 16
    """Scaling numerator (scale = alpha / rank)."""
    target_modules: TargetModules = "all-linear"


class TrainerResources(Strict):
    """What the trainer's actor reserves on the Ray cluster while it holds the model."""

    num_cpus: Annotated[float, Field(gt=0.0, le=1024.0)] = 1.0
    num_gpus: Annotated[float, Field(ge=0.0, le=64.0)] = 0.0


class TrainerCreate(Strict):
    """A trainer: a base model held by an actor, trained by your own loop through the primitives."""

    model: ModelRef
    lora: LoraSpec | None = None
    """LoRA settings; null (the default) trains every weight (full fine-tuning)."""
    resources: TrainerResources = Field(default_factory=TrainerResources)
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    """Seeds the adapters' initialisation and sampling without an explicit `seed`."""
    dtype: Dtype = "float32"
    """Compute dtype; weights and optimizer state stay float32."""
    idle_timeout_s: Annotated[int, Field(ge=1, le=7 * 86400)] = 600
    """After this long without a call the actor is released (its state saved first) and its resources freed;
    the next call restores it."""
    metadata: Metadata = Field(default_factory=dict)


class TrainerError(BaseModel):
    code: str
    message: str
    param: str | None = None


class TrainerPublic(BaseModel):
    """A trainer. `status`: `active` (takes calls), `idle` (released after `idle_timeout_s` with its state
    saved: the next call restores it), `released` (its actor was lost without a save: the next call
    restores the last save, or the base model), `deleted` or `failed` (takes no more calls)."""

    id: str
    object: Literal["trainer"] = "trainer"
    status: TrainerStatus
    model: str
    lora: LoraSpec | None
    resources: TrainerResources
    seed: int
    dtype: Dtype
    idle_timeout_s: int
    step: int
    """Optimizer steps taken."""
    tokens: int
    """Tokens processed by all its operations (usage)."""
    vocab_size: int | None
    """Token ids must be below this (null: the base model's config.json was not readable by the API)."""
    last_saved_step: int | None
    """The step of the last full save (a restore starts there)."""
    metadata: dict[str, str]
    error: TrainerError | None = None
    created_by: str | None
    created_at: int
    last_used_at: int
    released_at: int | None


class TrainersPublic(Page[TrainerPublic]):
    pass


# -- the primitives --------------------------------------------------------------------------------

class LossFnInputs(Strict):
    """Per-position inputs of the loss, each as long as the datum's `model_input`."""

    target_tokens: Tokens | None = None
    """The token each position predicts (every `loss_fn`)."""
    weights: Floats | None = None
    """Loss weight per position (0 masks it): `cross_entropy` and `dpo`."""
    advantages: Floats | None = None
    """`importance_sampling`, `ppo`, `cispo`, `dro` (0: the position counts for nothing)."""
    logprobs: Floats | None = None
    """The sampler's log-probabilities of `target_tokens`: `importance_sampling`, `ppo`, `cispo`, `dro`."""
    ref_logprobs: Floats | None = None
    """`dpo`: the reference model's log-probabilities (default: computed from the trainer's reference)."""


class Datum(Strict):
    model_input: Tokens
    loss_fn_inputs: LossFnInputs = Field(default_factory=LossFnInputs)


class LossFnConfig(Strict):
    """Tinker's names and meanings; `r` is the ratio of the trained to the sampling policy."""

    clip_low_threshold: Annotated[float, Field(ge=0.0, le=100.0)] | None = None
    """`ppo`, `cispo`: the lowest `r` counts as (an absolute ratio; default 0.8 for `ppo`, 0.0 for `cispo`)."""
    clip_high_threshold: Annotated[float, Field(ge=0.0, le=100.0)] | None = None
    """`ppo`, `cispo`: the highest `r` counts as, at least `clip_low_threshold` (default 1.2 for `ppo`,
    4.0 for `cispo`)."""
    beta: Annotated[float, Field(gt=0.0, le=100.0)] | None = None
    """`dpo`: the KL penalty (default 0.1); `dro`: the quadratic penalty's weight (default 0.05)."""


_RL_INPUTS = ("target_tokens", "logprobs", "advantages")
_NEEDS = {"cross_entropy": ("target_tokens", "weights"), "importance_sampling": _RL_INPUTS, "ppo": _RL_INPUTS,
          "cispo": _RL_INPUTS, "dro": _RL_INPUTS, "dpo": ("target_tokens", "weights")}
_ALLOWED = {**_NEEDS, "dpo": ("target_tokens", "weights", "ref_logprobs")}
_CONFIG = {"ppo": ("clip_low_threshold", "clip_high_threshold"),
           "cispo": ("clip_low_threshold", "clip_high_threshold"), "dro": ("beta",), "dpo": ("beta",)}


class ForwardBackwardRequest(Strict):
    """A batch of datums and the loss to compute on them (the same body for `forward`)."""

    data: Annotated[list[Datum], Field(min_length=1, max_length=MAX_DATUMS)]
    loss_fn: LossFn = "cross_entropy"
    loss_fn_config: LossFnConfig | None = None

    @model_validator(mode="after")
    def _consistent(self):
        total = 0
        for i, datum in enumerate(self.data):
            n = len(datum.model_input)
            total += n
            inputs = datum.loss_fn_inputs
            for name in LossFnInputs.model_fields:  # (the engine's order of checks: the same `param`)
                if getattr(inputs, name) is not None and name not in _ALLOWED[self.loss_fn]:
                    raise errors_at("ForwardBackwardRequest", (("data", i, "loss_fn_inputs", name), None,
                                                               f"loss_fn {self.loss_fn!r} does not use {name}"))
            for name in _NEEDS[self.loss_fn]:
                if getattr(inputs, name) is None:
                    raise errors_at("ForwardBackwardRequest", (("data", i, "loss_fn_inputs", name), None,
                                                               f"loss_fn {self.loss_fn!r} needs {name}"))
            for name in LossFnInputs.model_fields:
                value = getattr(inputs, name)
                if value is not None and len(value) != n:
                    raise errors_at("ForwardBackwardRequest", (
                        ("data", i, "loss_fn_inputs", name), None,
                        f"has {len(value)} values; model_input has {n} tokens (one per position)"))
        if total > MAX_TOKENS_PER_CALL:
            message = f"{total} tokens in one call; at most {MAX_TOKENS_PER_CALL}"
            raise errors_at("ForwardBackwardRequest", (("data",), None, message))
        if self.loss_fn == "dpo" and len(self.data) % 2:
            message = f"dpo takes (chosen, rejected) pairs: an even number of datums, not {len(self.data)}"
            raise errors_at("ForwardBackwardRequest", (("data",), None, message))
        if self.loss_fn_config is not None:
            allowed = _CONFIG.get(self.loss_fn, ())
            for name in self.loss_fn_config.model_fields_set:
                if name not in allowed:
                    raise errors_at("ForwardBackwardRequest", (("loss_fn_config", name), None,
                                                               f"loss_fn {self.loss_fn!r} does not use {name}"))
            low, high = self.loss_fn_config.clip_low_threshold, self.loss_fn_config.clip_high_threshold
            if low is not None and high is not None and high < low:
                raise errors_at("ForwardBackwardRequest", (("loss_fn_config", "clip_high_threshold"), None,
                                                           f"must be >= clip_low_threshold ({low:g})"))
        return self


class AdamParams(Strict):
    """AdamW hyperparameters of one step (they may change from step to step)."""

    learning_rate: Annotated[float, Field(gt=0.0, le=1.0)] = 1e-4
    beta1: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.9
    beta2: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.95
    eps: Annotated[float, Field(gt=0.0, le=1.0)] = 1e-12
    """Tinker's default."""
    weight_decay: Annotated[float, Field(ge=0.0, le=10.0)] = 0.0
    grad_clip_norm: Annotated[float, Field(ge=0.0, le=1e6)] = 0.0
    """Clip the global gradient norm to this (0 = no clipping)."""


class OptimStepRequest(Strict):
    """Apply the gradients accumulated since the last step."""

    adam_params: AdamParams = Field(default_factory=AdamParams)


PromptText = Annotated[str, Field(min_length=1, max_length=100_000)]


class SamplingParams(Strict):
    max_tokens: Annotated[int, Field(ge=1, le=MAX_NEW_TOKENS)] = 16
    temperature: Annotated[float, Field(ge=0.0, le=10.0)] = 1.0
    """0 = greedy."""
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    top_k: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    """0 = no top-k."""
    stop: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)] | TokenId],
                    Field(max_length=16)] = Field(default_factory=list)
    """Stop strings or token ids (the end-of-sequence token always stops)."""
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None


class SampleRequest(Strict):
    """Generate from the trainer's current weights, or from a `save_weights_for_sampler` snapshot."""

    prompts: Annotated[list[Tokens | PromptText], Field(min_length=1, max_length=MAX_PROMPTS)]
    """Token ids, or text (tokenized by the model's tokenizer, no chat template)."""
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    num_samples: Annotated[int, Field(ge=1, le=64)] = 1
    """Samples per prompt."""
    sampler_path: SavedModelId | None = None

    @model_validator(mode="after")
    def _size(self):
        if len(self.prompts) * self.num_samples > MAX_SAMPLES_PER_CALL:
            message = (f"{len(self.prompts)} prompts x {self.num_samples} samples; at most {MAX_SAMPLES_PER_CALL} "
                       "sequences per call")
            raise errors_at("SampleRequest", (("num_samples",), self.num_samples, message))
        return self


class SaveRequest(Strict):
    name: SaveName


class LoadStateRequest(Strict):
    path: SavedModelId
    optimizer: bool = True
    """Also load the optimizer state (Adam moments); false loads the weights only."""


class OperationError(BaseModel):
    code: str
    message: str
    param: str | None = None


class TrainerOperationPublic(BaseModel):
    """One call of a primitive. Operations of a trainer run one at a time in `seq` order; poll this
    (`GET /v1/trainers/{trainer_id}/operations/{operation_id}`, `wait` to long-poll) until `status` is
    `succeeded` (see `result`) or `failed` (see `error`)."""

    id: str
    object: Literal["trainer.operation"] = "trainer.operation"
    trainer_id: str
    seq: int
    kind: OperationKind
    status: OperationStatus
    result: dict[str, Any] | None
    """forward_backward / forward: `{loss_fn_outputs: [{logprobs}], metrics}`; optim_step: `{step, metrics}`;
    sample: `{sequences: [{prompt_index, tokens, text, logprobs, stop_reason, sampling_logprobs?}]}`
    (`logprobs` at temperature 1, as `forward` gives them; `sampling_logprobs` at the sampling
    temperature, when it is not 1); save_state: `{path, model_id, step, format}`; load_state: `{step}`; save_weights_for_sampler: `{path, model_id}`. `path` is a model id."""
    error: OperationError | None
    tokens: int
    """Tokens this operation processed (usage)."""
    created_at: int
    started_at: int | None
    finished_at: int | None


class TrainerOperationsPublic(Page[TrainerOperationPublic]):
    pass


class TrainerEventPublic(BaseModel):
    """One entry of a trainer's event log; `seq` counts from 1 without gaps."""

    object: Literal["trainer.event"] = "trainer.event"
    seq: int
    type: TrainerEventType
    data: dict[str, Any]
    """trainer.status `{status, reason?}`; trainer.operation `{operation_id, seq, kind, status, tokens, step?,
    metrics?, error?}`; trainer.model `{model_id, kind, name, step}`; trainer.warning `{code, message}`."""
    created_at: int


class TrainerEventsPublic(BaseModel):
    object: Literal["list"] = "list"
    data: list[TrainerEventPublic]
    has_more: bool
    last_seq: int | None
