"""Memory plan: the bytes one worker of a job needs, estimated before the job takes any resources.

Pure Python (the API never imports torch): the model's shape comes from its `config.json`, the exact
parameter count from its safetensors headers when they are there (an 8-byte length, then JSON). The
estimate follows what the engine keeps alive, per worker:

- weights: trained weights are float32 master copies; with a 16-bit `model.dtype` autocast also
  keeps a compute-dtype copy of every weight used in the step. Frozen models (reward, teacher) and
  a LoRA base are held in the compute dtype; a full fine-tune's reference in float32, as the policy. FSDP2 shards the float32 state over the
  workers and gathers two decoder layers at a time in the compute dtype.
- gradients (float32) and AdamW's two moments (float32) of the trainable parameters only (LoRA:
  the adapters). `fsdp_config.param_offload` moves sharded weights and gradients to host memory,
  `optimizer_offload` the moments.
- activations of the largest micro-batch: per decoder layer and token, the two RMSNorms' float32
  input and output, q/k before and after the rotary embedding, v and the attention output, the four
  MLP intermediates; plus the head (vocabulary logits and the loss's float32 temporaries, or a
  scalar head) and the working set of one layer's backward. Gradient checkpointing keeps only each
  layer's input and recomputes one layer at a time. Token counts follow the micro-batching: a token
  budget (`use_dynamic_bsz`) or rows x longest sequence; with `use_remove_padding` sequences are
  packed, so the budget counts real tokens. Ulysses sequence parallelism
  (`ulysses_sequence_parallel_size`) divides the decoder layers' tokens and the LM head's logits by
  the group's size (each worker only keeps the gathered hidden states of every token); the group
  shares its rows, so a worker's micro-batches draw from `sp` workers' rows.
- PPO: each role (actor, critic, reference, reward) separately; colocated roles live in one process,
  so their weights and optimizer state add up while activations (the roles run one after another)
  take the largest. Generation keeps a KV cache for every row a worker samples. The rollback
  snapshot (a CPU copy of the trained weights and optimizer state) is host memory.

On a GPU worker the device bytes are compared with one GPU's memory (`KEEL_GPU_MEMORY_BYTES`; a
worker uses one device), host bytes (offload, snapshots) with `KEEL_WORKER_MEMORY_BYTES`; on a CPU
worker everything is compared with `KEEL_WORKER_MEMORY_BYTES`. Either unknown: `fits` is None.
`bench.memory_plan` compares the estimate with measured peak RSS (docs/benchmarks.md).

The model's shape is read in `core.model_shape`, one model's bytes are estimated in
`core.model_memory`; this module assembles them into a job's plan per role and worker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.model_memory import (
    Memory,
    _get,
    frozen_weights,
    generation_activations,
    inference_activations,
    knobs,
    micro_tokens,
    resolve_lora_rank,
    trained_state,
    training_activations,
    training_transient,
)
from core.model_shape import Architecture, PlanError

CPU_ALLOCATOR_SLACK = 1.5
"""CPU workers: glibc keeps freed memory in its heaps (its mmap threshold rises to 32 MiB with the
first large free), so the resident set peaks above the live bytes by about this multiple of a
training step's transient working set (one layer's backward and the head's temporaries), measured
with `bench.memory_plan` under the default allocator. It applies to the supervised trainers, which
free every gradient between steps; PPO's roles keep theirs allocated and showed no such growth.
GPU slack is in `GPU_RUNTIME_BYTES`."""
CPU_RUNTIME_BYTES = 512 * 2**20
"""A worker process before it loads a model: Python, torch, transformers (about 450 MiB measured)."""
GPU_RUNTIME_BYTES = 1024 * 2**20
"""CUDA context, cuBLAS workspaces and the caching allocator's slack on one device."""


# --- the plan of a job ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Capacity:
    """Memory a worker may use: one GPU's (None: unknown), and the host's (None: unknown)."""

    gpu_bytes: int | None = None
    host_bytes: int | None = None


def _param(prefix: str, key: str) -> str:
    return f"method.hyperparameters.{prefix}{key}"


def plan_job(method: str, hp: Mapping[str, Any], resources: Mapping[str, Any],
             models: Mapping[str, Architecture | None], capacity: Capacity) -> dict[str, Any]:
    """The memory plan of a validated job: per worker, per role, and whether it fits.

    Args:
        method: `sft`, `reward_model`, `rm_distill`, `dpo`, `ppo`, `distill_policy` or `eval`.
        hp: `method.hyperparameters` as stored (defaults filled; knobs it lacks take their defaults).
        resources: the job's `resources`.
        models: `policy` (the model trained), and where the method has them `teacher` (rm_distill)
            and `reward` (PPO or eval with a reward model), `compare` (eval's `compare_to`); None for a
            model Keel cannot read here.
    """
    workers = int(resources.get("num_workers", 1) or 1)
    gpus = float(resources.get("gpus_per_worker", 0.0) or 0.0)
    colocate = bool(resources.get("colocate", True))
    arch = models.get("policy")
    if arch is None:
        raise PlanError("the model's config.json cannot be read here (a hub id or no config.json)")
    if method in ("ppo", "distill_policy"):
        # distill_policy's teacher: read here, or (a hub id) assumed the student's size.
        teacher = (models.get("teacher") or arch) if method == "distill_policy" else None
        roles, hints = _ppo_roles(hp, workers, arch, models.get("reward"), teacher)
        rollout_workers = int(resources.get("rollout_workers", 0) or 0)
        if rollout_workers and not _get(hp, "rollout.colocate", True):
            roles["rollout"] = _rollout_worker(hp, rollout_workers, arch)
    elif method == "eval":
        roles, hints = _eval_roles(hp, workers, arch, models.get("compare"), models.get("reward"))
    else:
        roles, hints = _supervised_roles(method, hp, workers, arch, models.get("teacher"))
    # Colocated PPO roles share a process: persistent state adds up, activations take the largest (the
    # roles run one after another). Otherwise each role (or phase: a teacher, then the student) alone.
    colocated = (method in ("ppo", "distill_policy") and colocate) or method == "eval"  # eval's roles are always colocated
    generator = roles.pop("rollout", None)  # rollout workers: processes of their own, always
    groups = [list(roles)] if colocated else [[name] for name in roles]
    if generator is not None:
        roles["rollout"] = generator
        groups.append(["rollout"])
    per_worker = max((_combine([roles[n] for n in group]) for group in groups), key=lambda m: m.total + m.host)
    device = "gpu" if gpus > 0 else "cpu"
    if device == "cpu":
        per_worker.allocator = CPU_ALLOCATOR_SLACK * max(roles[n].transient for n in roles)
    runtime = GPU_RUNTIME_BYTES if device == "gpu" else CPU_RUNTIME_BYTES
    fits, param, detail = _fit(per_worker, device, gpus, runtime, capacity, hints, roles)
    return {
        "object": "memory_plan", "method": method, "device": device, "num_workers": workers,
        "rollout_workers": int(resources.get("rollout_workers", 0) or 0) if "rollout" in roles else 0,
        "colocated": colocated,
        "per_worker": {**per_worker.public(), "allocator_bytes": round(per_worker.allocator), "runtime_bytes": runtime,
                       "required_bytes": round(per_worker.total + (0 if device == "gpu" else per_worker.host)
                                               + runtime)},
        "roles": {name: mem.public() for name, mem in roles.items()},
        "capacity": {"gpu_bytes": capacity.gpu_bytes, "host_bytes": capacity.host_bytes},
        "fits": fits, "param": param, "detail": detail,
    }


def _combine(parts: list[Memory]) -> Memory:
    out = Memory()
    for m in parts:
        out.weights += m.weights
        out.gradients += m.gradients
        out.optimizer += m.optimizer
        out.host += m.host
        out.parameters += m.parameters
        out.trainable_parameters += m.trainable_parameters
    out.activations = max((m.activations for m in parts), default=0.0)
    return out


def _supervised_roles(method: str, hp: Mapping[str, Any], workers: int, arch: Architecture,
                      teacher: Architecture | None) -> tuple[dict[str, Memory], dict[str, str]]:
    head = "lm" if method in ("sft", "dpo") else "score"
    lora = resolve_lora_rank(_get(hp, "model.lora_rank", "auto" if method == "rm_distill" else 0),
                             arch.parameters(head))
    k = knobs(hp, None, lora)
    mem = trained_state(arch, k, head, workers)
    sp = int(_get(hp, "ulysses_sequence_parallel_size", 1))  # a group of `sp` workers shares its rows
    rows = math.ceil(int(_get(hp, "data.train_batch_size", 64)) / max(1, workers // sp))
    if method == "sft":
        seq = int(_get(hp, "data.max_prompt_length", 1024)) + int(_get(hp, "data.max_response_length", 2048))
        per_row = 1
    else:
        seq = int(_get(hp, "data.max_length") or (int(_get(hp, "data.max_prompt_length", 1024))
                                                   + int(_get(hp, "data.max_response_length", 2048))))
        per_row = 2
    dynamic = bool(_get(hp, "use_dynamic_bsz", True))
    tokens = micro_tokens(rows=rows, seq=seq, per_row=per_row, dynamic=dynamic,
                          budget=int(_get(hp, "max_token_len_per_gpu", 3072)),
                          size=int(_get(hp, "micro_batch_size_per_gpu", 2)))
    mem.activations = training_activations(arch, k, tokens, head, "sft", seq, sp)
    mem.transient = training_transient(arch, k, tokens, head, "sft", seq, sp)
    roles = {"trainer": mem}
    if method == "dpo":
        # The frozen reference scores the data once before the policy loads (rank 0), then is released.
        # It holds its weights as the policy does (float32 masters unless LoRA: `load_reference`).
        ref = frozen_weights(arch, k.dtype if lora or _get(hp, "model.lora_adapter_path") else "float32", "lm")
        ref.activations = inference_activations(arch, k.dtype, tokens, "lm")
        roles = {"reference": ref, "trainer": mem}
    if method == "rm_distill" and teacher is not None:
        # The teacher scores the data once before the student loads (rank 0) and is then released:
        # a phase of its own, so the worker needs the larger of the two.
        t = frozen_weights(teacher, k.dtype, "score")
        t.activations = inference_activations(teacher, k.dtype, tokens, "score")
        roles = {"teacher": t, "trainer": mem}
    return roles, {"activations": _param("", "max_token_len_per_gpu" if dynamic else "micro_batch_size_per_gpu")}


def _ppo_roles(hp: Mapping[str, Any], workers: int, arch: Architecture, reward: Architecture | None,
               teacher: Architecture | None = None) -> tuple[dict[str, Memory], dict[str, str]]:
    lora = resolve_lora_rank(_get(hp, "model.lora_rank", 0), arch.parameters("lm"))
    if not lora and _get(hp, "model.lora_adapter_path"):
        lora = 16  # an existing adapter of unknown rank: small next to the model either way
    prompt, response = int(_get(hp, "data.max_prompt_length", 1024)), int(_get(hp, "data.max_response_length", 2048))
    seq = prompt + response
    n = int(_get(hp, "rollout.n", 5))
    samples = math.ceil(int(_get(hp, "data.train_batch_size", 64)) * n / workers)
    a_sp, c_sp = (int(_get(hp, f"{r}.ulysses_sequence_parallel_size", 1)) for r in ("actor", "critic"))
    # A sequence-parallel group trains on its `sp` workers' rows together.
    mini = math.ceil(int(_get(hp, "actor.ppo_mini_batch_size", 64)) * n / workers) * a_sp
    actor_k = knobs(hp, "actor", lora)
    a_dynamic = bool(_get(hp, "actor.use_dynamic_bsz", True))
    a_tokens = micro_tokens(rows=mini, seq=seq, per_row=1, dynamic=a_dynamic,
                            budget=int(_get(hp, "actor.ppo_max_token_len_per_gpu", 3072)),
                            size=int(_get(hp, "actor.ppo_micro_batch_size_per_gpu", 2)))
    # The no-grad passes (old/ref log-probs, values, scores) go over all samples in the actor's micro-batches.
    infer_tokens = micro_tokens(rows=samples, seq=seq, per_row=1, dynamic=a_dynamic,
                                budget=int(_get(hp, "actor.ppo_max_token_len_per_gpu", 3072)),
                                size=int(_get(hp, "actor.ppo_micro_batch_size_per_gpu", 2)))
    actor = trained_state(arch, actor_k, "lm", workers, snapshot=True)
    actor.activations = max(training_activations(arch, actor_k, a_tokens, "lm", "actor", seq, a_sp),
                            generation_activations(arch, actor_k.dtype, samples, prompt, response),
                            inference_activations(arch, actor_k.dtype, infer_tokens, "lm"))
    roles = {"actor": actor}
    if _get(hp, "algorithm.adv_estimator", "gae") == "gae":
        critic_k = knobs(hp, "critic", 0 if not lora else lora)
        c_mini = math.ceil(int(_get(hp, "critic.ppo_mini_batch_size") or _get(hp, "actor.ppo_mini_batch_size", 64))
                           * n / workers) * c_sp
        c_dynamic = bool(_get(hp, "critic.use_dynamic_bsz", True))
        c_budget = int(_get(hp, "critic.ppo_max_token_len_per_gpu", 3072))
        c_size = int(_get(hp, "critic.ppo_micro_batch_size_per_gpu", 2))
        c_tokens = micro_tokens(rows=c_mini, seq=seq, per_row=1, dynamic=c_dynamic, budget=c_budget, size=c_size)
        critic = trained_state(arch, critic_k, "score", workers, snapshot=True)
        critic.activations = max(
            training_activations(arch, critic_k, c_tokens, "score", "sft", seq, c_sp),
            inference_activations(arch, critic_k.dtype, micro_tokens(rows=samples, seq=seq, per_row=1,
                                                                     dynamic=c_dynamic, budget=c_budget,
                                                                     size=c_size), "score"))
        roles["critic"] = critic
    if not lora:  # with LoRA the actor, adapter disabled, is the reference
        ref = frozen_weights(arch, "float32", "lm")  # as the actor's masters: KL 0 at step 0 (`load_reference`)
        ref.activations = inference_activations(arch, actor_k.dtype, infer_tokens, "lm")
        roles["reference"] = ref
    if reward is not None:
        rm = frozen_weights(reward, actor_k.dtype, "score")
        rm.activations = inference_activations(reward, actor_k.dtype, infer_tokens, "score")
        roles["reward"] = rm
    if teacher is not None:  # float32, as the reference (`engine.roles.teacher`), over the same samples
        t = frozen_weights(teacher, "float32", "lm")
        t.activations = inference_activations(teacher, actor_k.dtype, infer_tokens, "lm")
        roles["teacher"] = t
    return roles, {"activations": _param("actor.", "ppo_max_token_len_per_gpu" if a_dynamic
                                         else "ppo_micro_batch_size_per_gpu")}


def _rollout_worker(hp: Mapping[str, Any], rollout_workers: int, arch: Architecture) -> Memory:
    """A rollout worker (`rollout.colocate: false`): the policy as the actor holds it (float32
    masters, no gradients or optimizer) and its share of a batch's generation."""
    prompt, response = int(_get(hp, "data.max_prompt_length", 1024)), int(_get(hp, "data.max_response_length", 2048))
    rows = math.ceil(int(_get(hp, "data.train_batch_size", 64)) * int(_get(hp, "rollout.n", 5)) / rollout_workers)
    mem = frozen_weights(arch, "float32", "lm")
    mem.activations = generation_activations(arch, knobs(hp, "actor", 0).dtype, rows, prompt, response)
    return mem


def _eval_roles(hp: Mapping[str, Any], workers: int, arch: Architecture, compare: Architecture | None,
                reward: Architecture | None) -> tuple[dict[str, Memory], dict[str, str]]:
    """Frozen models only: a sampler holds its weights and one batch's generation (its share of
    `data.val_batch_size * rollout.n` rows); a reward model its weights and a scoring micro-batch."""
    dtype = str(_get(hp, "model.dtype", "float32"))
    prompt, response = int(_get(hp, "data.max_prompt_length", 1024)), int(_get(hp, "data.max_response_length", 2048))
    rows = math.ceil(int(_get(hp, "data.val_batch_size", 64)) * int(_get(hp, "rollout.n", 1)) / workers)
    roles = {}
    for name, model in (("policy", arch), ("compare", compare)):
        if model is not None:
            roles[name] = frozen_weights(model, dtype, "lm")
            roles[name].activations = generation_activations(model, dtype, rows, prompt, response)
    if reward is not None:  # `engine.methods.evaluate` scores with a budget of max(3072, one row) tokens
        seq = prompt + response
        tokens = micro_tokens(rows=rows, seq=seq, per_row=1, dynamic=True, budget=max(3072, seq), size=2)
        roles["reward"] = frozen_weights(reward, dtype, "score")
        roles["reward"].activations = inference_activations(reward, dtype, tokens, "score")
    return roles, {"activations": _param("data.", "val_batch_size")}


def _fit(mem: Memory, device: str, gpus: float, runtime: int, capacity: Capacity, hints: Mapping[str, str],
         roles: Mapping[str, Memory]) -> tuple[bool | None, str | None, str]:
    """(fits, the field most worth changing when it does not, a sentence with the numbers)."""
    if device == "gpu":
        available = None if capacity.gpu_bytes is None else capacity.gpu_bytes * min(gpus, 1.0)
        need = mem.total + runtime
        where = "one GPU's memory (KEEL_GPU_MEMORY_BYTES)" + (f" x {gpus:g} of a GPU" if gpus < 1 else "")
        host_ok = capacity.host_bytes is None or mem.host <= capacity.host_bytes
    else:
        available = capacity.host_bytes
        need = mem.total + mem.host + runtime
        where = "the worker's memory (KEEL_WORKER_MEMORY_BYTES)"
        host_ok = True
    if available is None:
        return None, None, f"needs about {_gib(need)} per worker; {where} is not configured, so fit is not checked"
    if need <= available and host_ok:
        return True, None, f"needs about {_gib(need)} per worker of {_gib(available)} ({where})"
    if need <= available:  # the device fits, the host does not
        return False, "method.hyperparameters.model.fsdp_config", (
            f"offloaded state and snapshots need {_gib(mem.host)} of host memory per worker, more than "
            f"{_gib(capacity.host_bytes or 0)} (KEEL_WORKER_MEMORY_BYTES)")
    state = mem.gradients + mem.optimizer
    lora = any(m.trainable_parameters < m.parameters for m in roles.values())
    if mem.activations >= max(state, mem.weights):
        param = hints["activations"]  # smaller micro-batches (or gradient checkpointing)
    elif device == "gpu" and gpus < 1:
        param = "resources.gpus_per_worker"  # a whole GPU first
    elif state >= mem.weights and not lora:
        param = _param("", "model.lora_rank")  # adapters need a sliver of the gradients and moments
    else:
        param = "resources.num_workers" if state >= mem.weights else "model"  # FSDP2 shards over workers
    return False, param, (
        f"needs about {_gib(need)} per worker (weights {_gib(mem.weights)}, gradients {_gib(mem.gradients)}, "
        f"optimizer {_gib(mem.optimizer)}, activations {_gib(mem.activations)}, runtime {_gib(runtime)}) "
        f"but {where} is {_gib(available)}")


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def plan_for_dirs(method: str, hp: Mapping[str, Any], resources: Mapping[str, Any],
                  dirs: Mapping[str, str | None], capacity: Capacity) -> dict[str, Any]:
    """`plan_job` with each model read from its directory (None or unreadable: unknown)."""
    models = {name: (Architecture.from_dir(path) if path else None) for name, path in dirs.items()}
    return plan_job(method, hp, resources, models, capacity)
