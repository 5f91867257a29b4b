"""Deployment settings (env prefix `KEEL_`). Per-job hyperparameters never live here."""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

_PLACEHOLDER_SECRETS = {"", "changethis", "change-me", "dev-secret"}


class Settings(BaseSettings):
    """Every setting has an embedded default, so `keel up` runs with no configuration at all."""

    model_config = SettingsConfigDict(env_prefix="KEEL_", env_file=".env", extra="ignore")

    ENV: Literal["development", "test", "production"] = "development"
    HOME: Path = Path(".keel")
    """Root for embedded-mode state: SQLite file, broker queue, artifacts."""
    HOST: str = "127.0.0.1"
    PORT: int = 8000
    SECRET_KEY: str = "dev-secret"
    """Salt for API key hashes; must be set to a real secret in production."""
    DATABASE_URL: str = ""
    """SQLAlchemy URL; empty = SQLite file under HOME."""
    BROKER_URL: str = ""
    """Celery broker URL; empty = embedded SQLite-backed broker under HOME."""
    REDIS_URL: str = ""
    """Optional Redis for live event fan-out; empty = fan-out by polling the event table."""
    QUEUE_NAMESPACE: str = ""
    """Prefix for Celery queue names, so deployments (or test runs) sharing a broker stay apart."""
    RAY_ADDRESS: str = ""
    """Ray cluster address; empty = a local Ray on loopback started by the worker."""
    RAY_NUM_CPUS: int = 2
    STORAGE_URL: str = ""
    """Artifact store: a local directory (default HOME/artifacts; mounted at the same path on every
    Ray node) or an fsspec URL such as `s3://bucket/prefix` (docs/storage.md)."""
    STORAGE_OPTIONS: dict[str, Any] = Field(default_factory=dict)
    """fsspec options of a remote store as a JSON object, e.g. `{"endpoint_url": "http://minio:9000"}`;
    they travel with each job to the Ray nodes. Credentials may come from the usual AWS_* variables."""
    ARTIFACT_CACHE_DIR: str = ""
    """Node-local directory where job code stages remote artifacts (empty: <system temp>/keel-artifacts)."""
    MODEL_ROOTS: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Directories workers may load base models from (JSON list or comma-separated; empty = HOME/models)."""
    MAX_UPLOAD_BYTES: int = 2 * 1024**3
    MAX_RUNNING_JOBS_PER_PROJECT: int = 2
    WORKER_HEARTBEAT_S: float = 5.0
    WORKER_HEARTBEAT_TIMEOUT_S: float = 60.0
    MAX_JOB_CPUS: float = 0.0
    """Most CPUs one job may reserve in all (0 = no cap beyond the cluster's size)."""
    MAX_JOB_GPUS: float = 0.0
    """Most GPUs one job may reserve in all (0 = no cap beyond the cluster's size)."""
    AUTO_CPUS_PER_WORKER_MAX: int = Field(default=16, ge=1, le=1024)
    """Most CPUs per worker `resources.cpus_per_worker: auto` (the default) resolves to
    (`core.capacity.auto_cpus_per_worker`). Past about 16 torch's intra-op threads stop paying off on
    the small models jobs train on CPUs (per-op overhead and thread synchronisation dominate), while a
    bigger reservation would keep other jobs off the node."""
    GPU_MEMORY_BYTES: int = Field(default=0, ge=0)
    """Memory of one GPU of the cluster, for the memory plan (0 = unknown: GPU jobs are not checked)."""
    WORKER_MEMORY_BYTES: int = Field(default=0, ge=0)
    """Host memory one job worker may use, for the memory plan (0 = unknown: not checked)."""
    RATE_LIMIT_PER_MINUTE: int = 6000
    """Requests per minute per API key (0 disables)."""
    IDEMPOTENCY_TTL_S: int = 24 * 3600
    MAX_STREAMS_PER_KEY: int = Field(default=20, ge=0)
    """Concurrent event streams (SSE) one API key may hold open (0 = no cap); 429 beyond."""
    MAX_JSON_BODY_BYTES: int = Field(default=1024**2, ge=1)
    """Largest request body of the non-upload routes (413 beyond, refused before it is read)."""
    MAX_HEADER_BYTES: int = Field(default=64 * 1024, ge=1024)
    """Largest request line plus headers the API reads (beyond, the connection is refused before the rest
    is buffered). Set the reverse proxy's own limit no higher (docs/deployment.md)."""
    FORWARDED_ALLOW_IPS: str = "127.0.0.1"
    """Addresses (comma-separated, `*` = any) of proxies whose `X-Forwarded-For` names the client: the
    address the failed-authentication limit counts by. Only the proxy in front of the API belongs here."""
    AUTH_FAILURES_PER_MINUTE: int = Field(default=30, ge=0)
    """Requests with an invalid or revoked API key one client address may make per minute (0 = no limit);
    beyond, 429 with `Retry-After`, checked before the key is looked up."""
    MAX_KEYS_PER_PROJECT: int = Field(default=100, ge=0)
    """Active (unrevoked) API keys a project may hold (0 = no cap); creating one more is a 409 `too_many_keys`."""
    LOG_LEVEL: str = "INFO"
    LOG_FORMAT: Literal["json", "text"] | None = None
    """`json` (one object per line, with request_id / job_id) or `text`; default: json in production."""
    METRICS_TOKEN: str = ""
    """When set, `GET /metrics` needs `Authorization: Bearer <token>`; empty = open, like /healthz."""
    WORKER_METRICS_PORT: int = Field(default=0, ge=0, le=65535)
    """Port of the Prometheus endpoint of each worker's main process (0 = off)."""
    WORKER_METRICS_HOST: str = "127.0.0.1"
    """Address that endpoint binds (0.0.0.0 in containers, so Prometheus can reach it)."""
    WEBHOOK_ALLOW_PRIVATE: bool = False
    """Allow webhook URLs that resolve to private, loopback or link-local addresses (checked at creation
    and again before every delivery, against DNS rebinding). Off in production: such URLs reach the
    deployment's own network."""
    WEBHOOK_RETRY_SCHEDULE_S: list[float] = Field(default_factory=lambda: [5, 300, 1800, 7200, 18000, 36000, 36000])
    """Waits before each retry of a failed webhook delivery (JSON list; Standard Webhooks' schedule: about
    a day in all); after the last one the delivery is `failed`."""
    WEBHOOK_TIMEOUT_S: float = Field(default=15.0, gt=0)
    """How long one webhook delivery may take; slower is a failed attempt."""
    OUTBOX_POLL_S: float = Field(default=1.0, gt=0)
    """How often a worker scans new job events for webhooks and integrations and sends what is due."""
    ALLOW_PYTHON_GRADERS: bool = False
    """Run OpenAI `python` graders (user code, in a sandboxed process per batch: docs/openai.md#graders).
    Off: such a grader is a 400 `python_graders_disabled` (422 on `/v1/jobs`), and a queued job with one
    fails."""
    PYTHON_GRADER_CPU_S: float = Field(default=10.0, gt=0)
    """CPU seconds a python grader may spend on one sample; beyond, the sample scores 0."""
    PYTHON_GRADER_TIMEOUT_S: float = Field(default=30.0, gt=0)
    """Wall-clock seconds a python grader may spend on one sample; beyond, the sample scores 0."""
    PYTHON_GRADER_MEMORY_MB: int = Field(default=2048, ge=256)
    """Address space of a python grader's process (a bigger allocation is a MemoryError)."""
    PYTHON_GRADER_DISK_MB: int = Field(default=128, ge=1)
    """Bytes a python grader's process may keep in its temporary directory, all files together (a size-
    capped tmpfs of its own; beyond, a write fails with ENOSPC)."""
    MAX_GRADER_RUNS_PER_KEY: int = Field(default=4, ge=0)
    """`graders/run` calls one API key may have running at once (0 = no cap); 429 `too_many_grader_runs`."""
    MAX_GRADER_RUNS: int = Field(default=16, ge=0)
    """`graders/run` calls running at once in the whole deployment (0 = no cap); 429 `too_many_grader_runs`."""
    GRADER_MEMORY_MB: int = Field(default=8192, ge=64)
    """Address space of the process a `graders/run` evaluates in (`python -m engine.rewards.graders`; score models
    load there: raise it for big ones). Beyond, the call is a 400 `grader_resources_exceeded`."""
    INFERENCE_TOKENS_PER_MINUTE: int = Field(default=0, ge=0)
    """Tokens (prompt plus completion, as Serve counts them) one API key may spend per minute on
    `/v1/chat/completions` and `/v1/completions` (0 = no limit); 429 `rate_limited` beyond."""
    INFERENCE_MAX_N: int = Field(default=16, ge=1)
    """Most choices (`n`) one completion request may ask for."""
    INFERENCE_MAX_TOKENS: int = Field(default=4096, ge=1)
    """Most tokens one completion request may ask to generate (`max_tokens`, `max_completion_tokens`)."""
    SERVE_URL: str = "http://127.0.0.1:8100"
    """Ray Serve's HTTP ingress the API forwards completions to (`keel serve` listens on its port; in
    compose and Kubernetes it names the Ray head's Serve proxy; keep it on loopback or a private network)."""
    SERVE_MAX_REPLICAS: int = Field(default=2, ge=1)
    """Most replicas of one base model's deployment (autoscaled on queue depth from 0)."""
    SERVE_MAX_ADAPTERS: int = Field(default=8, ge=1)
    """LoRA adapters one replica keeps loaded (least recently used evicted, reloaded on demand)."""
    SERVE_MAX_BATCH: int = Field(default=32, ge=1)
    """Sequences one CPU replica decodes together (continuous batching)."""
    SERVE_REPLICA_CPUS: float = Field(default=1.0, gt=0)
    """CPUs one serving replica reserves (and counts in admission while it lives)."""
    SERVE_REPLICA_GPUS: float = Field(default=0.0, ge=0)
    """GPUs one serving replica reserves (> 0: the vLLM engine)."""
    SERVE_IDLE_S: float = Field(default=60.0, gt=0)
    """Seconds without requests before a base model's replicas scale down to none."""
    MLFLOW_TRACKING_URI_PREFIXES: list[str] = Field(default_factory=list)
    """MLflow tracking URIs jobs may name besides http(s) ones on public addresses, as prefixes (JSON list,
    e.g. `["http://mlflow.internal:5000", "file:///srv/mlruns"]`): an internal server or a shared directory."""
    ENV_ALLOWED_HOSTS: list[str] = Field(default_factory=list)
    """Hosts (names or addresses, JSON list, e.g. `["envs.internal", "10.0.0.7"]`) a job's remote environment
    (`environment: {"type": "openenv", "url": ...}`) may name although they are not public addresses; any
    other URL must pass the public-address check (`core.environments`). Checked again at connect time."""

    @model_validator(mode="before")
    @classmethod
    def _split_roots(cls, data):
        roots = data.get("MODEL_ROOTS") if isinstance(data, dict) else None
        if isinstance(roots, str):
            text = roots.strip()
            data["MODEL_ROOTS"] = json.loads(text) if text.startswith("[") else [
                r.strip() for r in text.split(",") if r.strip()]
        return data

    @model_validator(mode="after")
    def _refuse_placeholder_secret(self):
        if self.ENV == "production" and self.SECRET_KEY in _PLACEHOLDER_SECRETS:
            raise ValueError("KEEL_SECRET_KEY must be set to a real secret when KEEL_ENV=production")
        return self

    @cached_property
    def home(self) -> Path:
        return self.HOME.expanduser().resolve()

    @property
    def database_url(self) -> str:
        return self.DATABASE_URL or f"sqlite:///{self.home / 'keel.db'}"

    @property
    def broker_url(self) -> str:
        return self.BROKER_URL or f"sqla+sqlite:///{self.home / 'broker.db'}"

    @property
    def log_format(self) -> str:
        return self.LOG_FORMAT or ("json" if self.ENV == "production" else "text")

    @property
    def storage_url(self) -> str:
        return self.STORAGE_URL or str(self.home / "artifacts")

    @property
    def python_grader_limits(self) -> dict[str, float] | None:
        """What the engine gets for python graders (`engine.rewards.sandbox.Limits`); None: disabled."""
        if not self.ALLOW_PYTHON_GRADERS:
            return None
        return {"cpu_s": self.PYTHON_GRADER_CPU_S, "wall_s": self.PYTHON_GRADER_TIMEOUT_S,
                "memory_mb": self.PYTHON_GRADER_MEMORY_MB, "disk_mb": self.PYTHON_GRADER_DISK_MB}

    @property
    def model_roots(self) -> list[str]:
        """Allowed base-model directories (default: HOME/models); Keel's own outputs are always allowed."""
        roots = self.MODEL_ROOTS or [str(self.home / "models")]
        return [os.path.realpath(os.path.expanduser(r)) for r in roots]  # (Path.resolve's answer, faster)


settings = Settings()
