"""What a method is handed and hands back: where the job runs (`Resources`), the request
(`JobRequest`: artifacts, seed, config) and the result (`JobResult`, `ResultFile`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Resources:
    """Where a job runs: data-parallel workers and what each gets."""

    num_workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    colocate: bool = True
    """PPO: put all roles on one set of resources (else one placement group bundle per role)."""
    placement: Literal["pack", "spread", "strict_spread"] = "pack"
    """How the workers' bundles go onto nodes: `pack` (as few nodes as fit), `spread` (as many as
    possible), `strict_spread` (one node per bundle, or wait). Ray's PACK / SPREAD / STRICT_SPREAD."""
    executor: Literal["local", "ray"] = "ray"
    """`ray`: workers are Ray actors (the controller, PPO's roles, data-parallel replicas). `local`:
    the job runs in the worker's own process on its one device, without Ray (one worker only)."""
    rollout_workers: int = 0
    """PPO with `rollout.colocate: false`: workers that only generate, each a bundle of its own."""


@dataclass(frozen=True)
class JobRequest:
    """Everything a method needs to run. Artifact references (model, files, output, checkpoints,
    resume) are local paths of a store mounted on every node, or URLs of a remote store that each
    process stages or uploads itself (`engine.runtime.artifacts`); hub ids pass through."""

    job_id: str
    method: str
    config: Any
    """One of `METHOD_CONFIGS` values."""
    model_path: str
    training_file: str
    output_dir: str
    checkpoint_dir: str
    validation_file: str | None = None
    seed: int = 0
    resume_from: str | None = None
    """A checkpoint directory to continue from (exact resume)."""
    teacher_path: str | None = None
    """rm_distill: the teacher reward model."""
    reward: dict[str, Any] = field(default_factory=dict)
    """ppo, eval: `{"model_path": dir}` or `{"function": "gsm8k"}`."""
    environment: dict[str, Any] | None = None
    """ppo with `rollout.multi_turn`: the job's episode environment spec (a row's own overrides it)."""
    compare_to_path: str | None = None
    """eval: the model whose responses the evaluated model's are judged against (win rate)."""
    resources: Resources = Resources()
    allowed_model_roots: tuple[str, ...] = ()
    ray_address: str | None = None
    time_used_s: float = 0.0
    """Seconds the job already ran before this attempt (`trainer.max_duration_s` counts them)."""
    storage_options: dict[str, Any] = field(default_factory=dict)
    """fsspec options (endpoint, credentials) of the store behind any URL above (`engine.runtime.artifacts`)."""
    artifact_cache_dir: str | None = None
    """Node-local directory where remote artifacts are staged (None: `<system temp>/keel-artifacts`)."""
    environment_allowed_hosts: tuple[str, ...] = ()
    """Hosts a remote environment may be on although not public (`KEEL_ENV_ALLOWED_HOSTS`), for
    `engine.environments.building.EnvironmentContext.allowed_hosts`."""
    environment_python: dict[str, Any] | None = field(default_factory=dict)
    """The `tools` environment's `python` tool: the deployment's python-grader limits (the worker sets
    them), None where the deployment runs no python (`KEEL_ALLOW_PYTHON_GRADERS` off: the tool is
    withdrawn), `{}` without a worker (the sandbox's defaults)."""


@dataclass(frozen=True)
class ResultFile:
    """A file a method wrote for the user (not a model); the service registers it as a File."""

    purpose: str
    """The File purpose, e.g. `eval_results`."""
    name: str
    """Its name inside the job's `output_dir`."""
    rows: int


@dataclass(frozen=True)
class JobResult:
    """What a finished method hands back: the output model (None for methods without one, such as
    `eval`), the final metrics and any result files."""

    output_dir: str
    model_format: Literal["hf", "lora"] | None
    model_kind: Literal["policy", "reward_model", "value_model"] | None
    metrics: dict[str, float] = field(default_factory=dict)
    files: tuple[ResultFile, ...] = ()
