"""A create request's references and checks: its files, checkpoint, models and graders resolved for
the project, lengths defaulted from the model's context window, and what the model and cluster can
hold (context, parallelism, rows); the validated spec a job row stores."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from api import model_refs
from api.errors import ApiError, not_found
from api.graders import check_job_grader
from api.routes.jobs import trajectories as recorded_trajectories
from api.schemas.jobs import (
    FILE_PURPOSE,
    DistillPolicyMethod,
    EvalMethod,
    JobCreate,
    PPOMethod,
    RMDistillMethod,
)
from core import environments
from core.capacity import FRESH, NODE_COLUMNS, STALE_S, Node, auto_cpus_per_worker, fresh_nodes, nodes_of
from core.config import settings
from core.dataset_stats import longest_token_chars, min_tokens
from core.integrations import check_tracking_uri
from core.models import Checkpoint, ClusterNode, File, Job, Model

_FILES = File.__table__.c
_FILE_AND_NODES = (select(_FILES.project_id, _FILES.deleted_at, _FILES.purpose, _FILES.status, *NODE_COLUMNS)
                   .select_from(File.__table__.outerjoin(ClusterNode.__table__, FRESH))
                   .where(_FILES.id == bindparam("file_id")).order_by(NODE_COLUMNS[0]))
"""What `_training_file` checks, and no more (not the file's column stats), with the cluster's fresh
capacity beside it (a row per node, or one with null node columns): one round trip for both, which a
create needs together. Built once, read without the ORM's loading."""


PPO_METHODS = ("ppo", "distill_policy")
"""Methods that run PPO's roles (`distill_policy` adds a teacher)."""

def _training_file(db: Session, project_id: str, file_id: str, method: str, param: str,
                   purpose: str | None = None) -> list[Node] | None:
    """Check a file the job reads (of `purpose`, else the method's); returns the cluster's fresh nodes
    (`core.capacity.fresh_nodes`), read in the same statement."""
    # On the session's connection (its transaction): a Core statement needs none of the ORM's execution.
    rows = db.connection().execute(_FILE_AND_NODES, {"file_id": file_id, "max_age_s": STALE_S}).all()
    file = rows[0] if rows else None
    if file is None or file.project_id != project_id or file.deleted_at is not None:
        raise not_found("file", file_id, param=param)
    want = purpose or FILE_PURPOSE[method]
    if file.purpose != want:
        raise ApiError(422, "invalid_file_purpose", f"{param}: {file_id} has purpose {file.purpose!r}; "
                       f"method {method!r} needs {want!r}.", param=param)
    if file.status != "processed":
        raise ApiError(422, "file_not_ready", f"{param}: {file_id} is {file.status}, not processed.", param=param)
    return nodes_of(row[4:] for row in rows)


def _checkpoint(db: Session, project_id: str, checkpoint_id: str, method: str) -> Checkpoint:
    ckpt = db.get(Checkpoint, checkpoint_id)
    if ckpt is None or ckpt.project_id != project_id:
        raise not_found("checkpoint", checkpoint_id, param="from_checkpoint")
    source = db.get(Job, ckpt.job_id)
    if source is None or source.method != method:
        raise ApiError(422, "invalid_checkpoint", f"from_checkpoint: {checkpoint_id} belongs to a "
                       f"{source.method if source else 'deleted'} job; continue a {method} job from a {method} "
                       "checkpoint.", param="from_checkpoint")
    return ckpt


_PAIR_METHODS = ("reward_model", "rm_distill", "dpo")
"""Methods whose sequences are capped by `data.max_length` (prompt + chosen / rejected)."""


def default_lengths(window: int, method: str, data: Any) -> dict[str, int]:
    """The lengths a request left out, from the model's context window (as the OpenAI route does):
    the prompt gets up to half the window (at most the engine's 1024), the response the rest (at
    most 2048); pair methods cap `max_length` at the window. Given lengths are kept."""
    given = data.model_fields_set
    out: dict[str, int] = {}
    prompt = data.max_prompt_length if "max_prompt_length" in given else None
    response = data.max_response_length if "max_response_length" in given else None
    if prompt is None:
        prompt = out["max_prompt_length"] = max(1, min(1024, window // 2, window - (response or 0)))
    if response is None:
        out["max_response_length"] = max(1, min(2048, window - prompt))
    if method in _PAIR_METHODS and "max_length" in type(data).model_fields and "max_length" not in given:
        out["max_length"] = min(window, 3072)
    return out


def _check_context(db: Session, body: JobCreate) -> None:
    """Sequences the job would build must fit the model: prompt + response tokens (SFT, PPO), or
    `max_length` (reward models, defaulting to the same sum). Lengths the request left out are
    first derived from the context window (`default_lengths`)."""
    window = model_refs.context_window_of(db, body.model)
    if window is None:
        return
    data, prefix = body.method.hyperparameters.data, "method.hyperparameters.data."
    for name, value in default_lengths(window, body.method.type, data).items():
        setattr(data, name, value)
    if body.method.type in ("reward_model", "rm_distill", "dpo") and data.max_length is not None:
        total, param = data.max_length, prefix + "max_length"
    else:
        total, param = data.max_prompt_length + data.max_response_length, prefix + "max_response_length"
    if total > window:
        raise ApiError(422, "context_too_long", f"{param}: sequences of up to {total} tokens do not fit the "
                       f"model's context window of {window} tokens (its config.json); lower the lengths.",
                       param=param)


def _check_parallel(db: Session, body: JobCreate) -> None:
    """`ulysses_sequence_parallel_size` must divide `resources.num_workers` and the model's attention
    and key/value heads (config.json, when Keel can read it), for SFT, reward models and each PPO
    role (`actor.`, `critic.`, `ref.`). vllm's `rollout.tensor_model_parallel_size` must divide the
    GPUs of one rollout worker."""
    hp, prefix = body.method.hyperparameters, "method.hyperparameters."
    roles = ({"actor.": hp.actor, "critic.": hp.critic, "ref.": hp.ref} if body.method.type in PPO_METHODS
             else {"": hp} if hasattr(hp, "ulysses_sequence_parallel_size") else {})
    config = None
    for role, cfg in roles.items():
        sp, param = cfg.ulysses_sequence_parallel_size, f"{prefix}{role}ulysses_sequence_parallel_size"
        if sp == 1:
            continue
        if body.resources.num_workers % sp:
            raise ApiError(422, "invalid_request", f"{param}: {sp} must divide resources.num_workers "
                           f"({body.resources.num_workers}): the data-parallel size is their quotient.", param=param)
        config = config if config is not None else (model_refs.model_config(db, body.model) or {})
        heads = config.get("num_attention_heads")
        kv = config.get("num_key_value_heads") or heads
        if isinstance(heads, int) and isinstance(kv, int) and (heads % sp or kv % sp):
            raise ApiError(422, "invalid_request", f"{param}: {sp} must divide the model's {heads} attention "
                           f"heads and {kv} key/value heads (its config.json).", param=param)
    if body.method.type in PPO_METHODS:
        _check_rollout_workers(body)
    if body.method.type in PPO_METHODS and hp.rollout.tensor_model_parallel_size > 1:
        tp, gpus = hp.rollout.tensor_model_parallel_size, body.resources.gpus_per_worker
        if gpus != int(gpus) or int(gpus) % tp:
            param = prefix + "rollout.tensor_model_parallel_size"
            raise ApiError(422, "invalid_request", f"{param}: {tp} must divide the GPUs of a rollout worker "
                           f"(resources.gpus_per_worker {gpus:g}).", param=param)


def _check_rollout_workers(body: JobCreate) -> None:
    """`rollout.colocate: false` generates on `resources.rollout_workers` workers of its own (at least
    one); with colocated generation there are none."""
    rollout, workers = body.method.hyperparameters.rollout, body.resources.rollout_workers
    if not rollout.colocate and workers < 1:
        param = "resources.rollout_workers"
        raise ApiError(422, "invalid_request", f"{param}: rollout.colocate false generates on workers of its "
                       "own; set resources.rollout_workers to at least 1.", param=param)
    hp = body.method.hyperparameters
    if not rollout.colocate and body.resources.num_workers > 1 and hp.actor.strategy == "fsdp2":
        param = "method.hyperparameters.rollout.colocate"
        raise ApiError(422, "invalid_request", f"{param}: separate rollout workers read the full weights; "
                       "actor.strategy fsdp2 over several workers needs rollout.colocate true.", param=param)
    if rollout.colocate and workers:
        param = "resources.rollout_workers"
        raise ApiError(422, "invalid_request", f"{param}: {workers} rollout workers need "
                       "method.hyperparameters.rollout.colocate false.", param=param)


_FILE_STATS = select(File.stats).where(File.id == bindparam("file_id"))


def _check_rows_fit(db: Session, body: JobCreate) -> None:
    """With `truncation: error`, refuse a job whose file certainly holds a row over a length limit,
    before it is queued: the file's recorded longest cells (characters, `core.dataset_stats`) over the
    most characters one token of the model's tokenizer covers give the fewest tokens that row can take
    (`core.dataset_stats.min_tokens`). With `filter_overlong_prompts` the longest row may be dropped: no
    check."""
    data = body.method.hyperparameters.data
    if data.truncation != "error" or data.filter_overlong_prompts:
        return
    path = model_refs.model_path(db, body.model)
    per_token = longest_token_chars(path) if path else None
    if per_token is None:
        return
    method = body.method.type
    for param, file_id in (("training_file", body.training_file), ("validation_file", body.validation_file)):
        stats = db.scalar(_FILE_STATS, {"file_id": file_id}) if file_id else None
        if not stats:
            continue
        prompt = min_tokens(stats, "prompt", per_token)
        if method in _PAIR_METHODS:
            total = data.max_length or data.max_prompt_length + data.max_response_length
            # The row with the longest cell holds at least that many tokens, plus EOS on a response.
            need = max(prompt, *(min_tokens(stats, c, per_token) + 1 for c in ("chosen", "rejected")))
            limits = [(need, total, "max_length", "prompt + response")]
        else:
            limits = [(prompt, data.max_prompt_length, "max_prompt_length", "prompt")]
            if method == "sft":
                response = min_tokens(stats, "response", per_token) + 1
                limits.append((response, data.max_response_length, "max_response_length", "response"))
                if data.max_length is not None:
                    limits.append((max(prompt, response), data.max_length, "max_length", "prompt + response"))
        for need, limit, name, what in limits:
            if need > limit:
                raise ApiError(422, "invalid_file", f"{param}: a row's {what} has at least {need} tokens (the "
                               f"file's longest cells, at most {per_token} characters a token for this model's "
                               f"tokenizer), more than data.{name}={limit}; raise data.{name}, or set "
                               "data.truncation (left, right, middle) or data.filter_overlong_prompts.",
                               param=param)


def _resolve(db: Session, project_id: str, body: JobCreate, *, dry_run: bool = False
             ) -> tuple[dict[str, Any], list[Node] | None]:
    """Check every reference in the request; returns the spec to store (normalised, defaults filled,
    `cpus_per_worker: auto` resolved against the nodes) and the cluster's fresh nodes (read with the
    training file), which admission reads too. A PPO job on recorded trajectories gets its snapshot
    as its training file here (`api.routes.jobs.trajectories`; not written with `dry_run`)."""
    method = body.method
    body.model = model_refs.resolve(db, project_id, body.model, "model")
    _check_context(db, body)
    _check_parallel(db, body)
    recorded = recorded_trajectories.recorded(body)
    if recorded:
        recorded_trajectories.snapshot(db, project_id, body, dry_run=dry_run)
    nodes = (fresh_nodes(db) if body.training_file is None else  # a dry run's snapshot: not written
             _training_file(db, project_id, body.training_file, method.type, "training_file",
                            purpose=recorded_trajectories.PURPOSE if recorded else None))
    if body.validation_file is not None:
        _training_file(db, project_id, body.validation_file, method.type, "validation_file")
    _check_rows_fit(db, body)
    if isinstance(method, RMDistillMethod):
        method.teacher = model_refs.resolve(db, project_id, method.teacher, "method.teacher", reward=True)
    if isinstance(method, DistillPolicyMethod):  # a policy, read with the student's tokenizer
        method.teacher = model_refs.resolve(db, project_id, method.teacher, "method.teacher")
    rewarded = isinstance(method, PPOMethod | EvalMethod | DistillPolicyMethod) and method.reward is not None
    if rewarded and method.reward.model is not None:
        method.reward.model = model_refs.resolve(db, project_id, method.reward.model, "method.reward.model",
                                                 reward=True)
    if rewarded and method.reward.function == "grader":
        method.reward.options = check_job_grader(db, project_id, method.reward.options)
    if rewarded and method.reward.function == "code_tests":
        _check_code_tests(method.reward.options)
    if isinstance(method, EvalMethod):
        _check_eval(db, project_id, body, method)
    adapter = getattr(method.hyperparameters.model, "lora_adapter_path", None)  # eval has no adapters
    if adapter is not None:
        method.hyperparameters.model.lora_adapter_path = model_refs.model_dir(
            adapter, "method.hyperparameters.model.lora_adapter_path")
    if body.from_checkpoint is not None:
        _checkpoint(db, project_id, body.from_checkpoint, method.type)
    _check_integrations(body)
    if isinstance(method, PPOMethod) and method.environment is not None:
        _check_python_tool(method.environment.model_dump(mode="json"))
    if isinstance(method, PPOMethod) and method.environment is not None:  # a remote one's URL (blocking DNS)
        problem = environments.environment_url_problem(method.environment.model_dump(mode="json"))
        if problem is not None:
            param = f"method.environment.{problem[0]}"
            raise ApiError(422, "invalid_url", f"{param}: {problem[1]}.", param=param)
    spec = body.model_dump(mode="json")
    if body.resources.cpus_per_worker == "auto":  # stored as the number: admission, workers and engine read it
        body.resources.cpus_per_worker = float(auto_cpus_per_worker(
            spec, nodes, cap=settings.AUTO_CPUS_PER_WORKER_MAX, max_cpus=settings.MAX_JOB_CPUS))
        spec["resources"]["cpus_per_worker"] = body.resources.cpus_per_worker
    return spec, nodes


def _check_python_tool(environment: dict[str, Any]) -> None:
    """A `tools` environment that names the `python` tool runs the policy's code, as code_tests does:
    refused where python graders are. (Without a list the engine offers only what the deployment runs.)"""
    if environment.get("type") != "tools" or settings.ALLOW_PYTHON_GRADERS:
        return
    tools = environment.get("tools") or []
    names = [t if isinstance(t, str) else ((t.get("function") or {}).get("name") if isinstance(t, dict) else None)
             for t in (tools if isinstance(tools, list) else [])]
    if "python" in names:
        raise ApiError(422, "python_graders_disabled", "method.environment.tools: the python tool runs the policy's "
                       "code, and this deployment does not run python code (KEEL_ALLOW_PYTHON_GRADERS).",
                       param="method.environment.tools")


def _check_code_tests(options: dict[str, Any]) -> None:
    """`code_tests` runs the policy's code in the python graders' sandbox: refused where python graders are
    (a tenant steers what its policy writes); its options checked as the engine checks them."""
    if not settings.ALLOW_PYTHON_GRADERS:
        raise ApiError(422, "python_graders_disabled", "method.reward.function: code_tests runs the policy's code, "
                       "and this deployment does not run python code (KEEL_ALLOW_PYTHON_GRADERS).",
                       param="method.reward.function")
    for key, value in options.items():
        param = f"method.reward.options.{key}"
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if key == "timeout_s" and not (number and 0 < value < 1e6):
            raise ApiError(422, "invalid_request", f"{param}: a positive number of seconds.", param=param)
        if key == "parallel" and not (number and isinstance(value, int) and 1 <= value <= _MAX_CODE_TESTS_PARALLEL):
            raise ApiError(422, "invalid_request", f"{param}: an integer from 1 to {_MAX_CODE_TESTS_PARALLEL}.",
                           param=param)
        if key not in ("timeout_s", "parallel"):
            raise ApiError(422, "invalid_request", f"{param}: code_tests takes the options timeout_s and parallel.",
                           param=param)


_MAX_CODE_TESTS_PARALLEL = 32
"""engine.rewards.code_tests.MAX_PARALLEL (the API does not import the engine)."""


def _check_integrations(body: JobCreate) -> None:
    """One tracker of each type, and MLflow URIs the deployment allows (`core.integrations`)."""
    seen: set[str] = set()
    for i, integration in enumerate(body.integrations):
        if integration.type in seen:
            raise ApiError(422, "invalid_request", f"integrations.{i}: a second {integration.type} integration; "
                           "at most one of each type.", param=f"integrations.{i}.type")
        seen.add(integration.type)
        if integration.mlflow is not None:
            try:
                check_tracking_uri(integration.mlflow.tracking_uri)
            except ValueError as exc:
                param = f"integrations.{i}.mlflow.tracking_uri"
                raise ApiError(422, "invalid_url", f"{param}: {exc}.", param=param) from exc


def _check_eval(db: Session, project_id: str, body: JobCreate, method: EvalMethod) -> None:
    """An evaluation reads one prompts file, and `compare_to` must be a model that generates."""
    if body.validation_file is not None:
        raise ApiError(422, "invalid_request", "validation_file: an eval job evaluates on training_file only; "
                       "leave validation_file out.", param="validation_file")
    if method.compare_to is not None:
        method.compare_to = model_refs.resolve(db, project_id, method.compare_to, "method.compare_to")
        model = db.get(Model, method.compare_to) if method.compare_to.startswith("model-") else None
        if model is not None and model.kind != "policy":
            raise ApiError(422, "invalid_model", f"method.compare_to: {model.id} is a {model.kind}, not a policy.",
                           param="method.compare_to")
