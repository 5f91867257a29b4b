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
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
FP32 = 4
ADAM_STATES = 2
"""AdamW keeps exp_avg and exp_avg_sq, float32, per trainable parameter."""
LORA_TARGETS = 7
"""`all-linear` in a Llama/Qwen2 layer: q, k, v, o, gate, up, down."""
LOSS_HEAD_TEMPS = {"sft": 3.5, "actor": 6.0, "inference": 3.0}
"""Float32 vocabulary-sized temporaries per token around the LM head: SFT's log-prob loss
(log-softmax, its backward and the slice's gradient), the PPO actor's (log-probs and entropy), and a
no-grad log-prob pass. Measured with `bench.memory_plan`."""
SAMPLING_BYTES_PER_LOGIT = 40
"""Sampling one token, per row and vocabulary entry: the float32 logits, their scaled and softmax
copies and the float64 cumulative mass the inverse-CDF draw searches (20 bytes), with room for top-k/top-p's
sorted values and int64 indices."""
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
_MAX_CONFIG_BYTES = 1024**2
_MAX_HEADER_BYTES = 100 * 1024**2


class PlanError(ValueError):
    """The model's config.json lacks what the estimate needs."""


# --- the model's shape ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Architecture:
    """A Llama/Qwen2-style decoder, from config.json."""

    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    exact_parameters: int | None = None
    """From the safetensors headers (the stored causal LM), when readable."""
    exact_lm_head: int | None = None
    """Parameters stored under `lm_head` (0 when tied or absent)."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Architecture:
        """Read the fields; multimodal configs nest the language model under `text_config`."""
        if isinstance(config.get("text_config"), Mapping) and "hidden_size" not in config:
            config = config["text_config"]

        def positive(key: str, default: int | None = None) -> int:
            value = config.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PlanError(f"config.json has no positive integer {key!r}")
            return value

        hidden = positive("hidden_size")
        heads = positive("num_attention_heads")
        head_dim = config.get("head_dim")
        if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim <= 0:
            head_dim = hidden // heads
        model_type = str(config.get("model_type", ""))
        return cls(hidden_size=hidden, num_hidden_layers=positive("num_hidden_layers"),
                   intermediate_size=positive("intermediate_size"), num_attention_heads=heads,
                   num_key_value_heads=positive("num_key_value_heads", heads), head_dim=head_dim,
                   vocab_size=positive("vocab_size"), tie_word_embeddings=bool(config.get("tie_word_embeddings")),
                   attention_bias=bool(config.get("attention_bias", model_type.startswith("qwen2"))))

    @classmethod
    def from_dir(cls, path: str | Path) -> Architecture | None:
        """The architecture of a model directory (None: no readable config.json there); the exact
        count from its safetensors headers when they can be read. Remembered while the directory's
        config.json and weight files keep their size and modification time (every job create and
        dry run asks, and a large model's headers take milliseconds to parse)."""
        stamp = _dir_stamp(path)
        if stamp is not None and (hit := _ARCHITECTURES.get(str(path))) is not None and hit[0] == stamp:
            return hit[1]
        arch = cls._read_dir(path)
        if stamp is not None:
            if len(_ARCHITECTURES) >= 256:
                _ARCHITECTURES.clear()
            _ARCHITECTURES[str(path)] = (stamp, arch)
        return arch

    @classmethod
    def _read_dir(cls, path: str | Path) -> Architecture | None:
        config = read_config(path)
        if config is None:
            return None
        arch = cls.from_config(config)
        counts = safetensors_counts(path)
        if counts is None:
            return arch
        total, lm_head = counts
        return cls(**{**arch.__dict__, "exact_parameters": total, "exact_lm_head": lm_head})

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    def layer_parameters(self) -> int:
        h, i = self.hidden_size, self.intermediate_size
        attention = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.attention_bias:
            attention += self.q_dim + 2 * self.kv_dim
        return attention + 3 * h * i + 2 * h  # + the two RMSNorm weights

    def parameters(self, head: str = "lm") -> int:
        """All parameters with the `lm` head (a causal LM) or the `score` head (a reward or value
        model: no LM head, one output per hidden state)."""
        h, v = self.hidden_size, self.vocab_size
        lm_head = 0 if self.tie_word_embeddings else v * h
        if self.exact_parameters is not None:
            body = self.exact_parameters - (self.exact_lm_head if self.exact_lm_head is not None else lm_head)
        else:
            body = v * h + self.num_hidden_layers * self.layer_parameters() + h
        return body + (lm_head if head == "lm" else h)

    def lora_parameters(self, rank: int) -> int:
        """Adapter parameters of rank `rank` on every linear layer of every decoder layer."""
        h, i = self.hidden_size, self.intermediate_size
        shapes = [(h, self.q_dim), (h, self.kv_dim), (h, self.kv_dim), (self.q_dim, h), (h, i), (h, i), (i, h)]
        return self.num_hidden_layers * rank * sum(a + b for a, b in shapes)


_ARCHITECTURES: dict[str, tuple[tuple, Architecture | None]] = {}


def _dir_stamp(path: str | Path) -> tuple | None:
    """What `Architecture.from_dir` reads, by (name, inode, size, mtime): a changed, added or removed
    file changes it. None when the directory cannot be listed."""
    files = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name == "config.json" or entry.name.endswith(".safetensors"):
                    st = entry.stat()
                    files.append((entry.name, st.st_ino, st.st_size, st.st_mtime_ns))
    except OSError:
        return None
    return tuple(sorted(files))


_CONFIGS: dict[str, tuple[tuple[int, int, int], dict[str, Any] | None]] = {}
"""`read_config`'s answers by file, with the file's (inode, size, mtime) when read."""


def read_config(path: str | Path) -> dict[str, Any] | None:
    """config.json of a model directory (bounded read; never opens a FIFO or a device). Remembered
    while the file keeps its inode, size and mtime: every job create reads it. The dict is shared
    between callers: read it, do not change it."""
    file = os.path.join(path, "config.json")
    try:
        st = os.stat(file)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    if (hit := _CONFIGS.get(file)) is not None and hit[0] == stamp:
        return hit[1]
    try:
        with open(file, "rb") as f:
            raw = f.read(_MAX_CONFIG_BYTES + 1)
        data = json.loads(raw) if len(raw) <= _MAX_CONFIG_BYTES else None
    except (OSError, ValueError):
        return None
    config = data if isinstance(data, dict) else None
    if len(_CONFIGS) >= 256:  # a bound, not an LRU: models in use come back at once
        _CONFIGS.clear()
    _CONFIGS[file] = (stamp, config)
    return config


def safetensors_counts(path: str | Path) -> tuple[int, int] | None:
    """(parameters, of which `lm_head`) from the headers of the directory's weight files (adapters
    left out); None when there are none or one is unreadable."""
    files = sorted(f for f in Path(path).glob("*.safetensors") if not f.name.startswith("adapter_"))
    if not files:
        return None
    total = lm_head = 0
    try:
        for file in files:
            if not file.is_file():
                return None
            with file.open("rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                if n > _MAX_HEADER_BYTES:
                    return None
                header = json.loads(f.read(n))
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                numel = math.prod(int(d) for d in entry["shape"])
                total += numel
                if "lm_head" in name:
                    lm_head += numel
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    return total, lm_head


# --- the job's knobs, with defaults for anything a spec does not carry ------------------------------

def _get(tree: Mapping[str, Any] | None, path: str, default: Any = None) -> Any:
    node: Any = tree or {}
    for part in path.split("."):
        if not isinstance(node, Mapping) or node.get(part) is None:
            return default
        node = node[part]
    return node


@dataclass(frozen=True)
class Knobs:
    """What shapes memory for one trained or frozen model, read from the hyperparameters."""

    dtype: str
    checkpointing: bool
    packing: bool
    lora_rank: int
    strategy: str
    param_offload: bool
    optimizer_offload: bool


def knobs(hp: Mapping[str, Any], role: str | None, lora_rank: int) -> Knobs:
    """`role` (`actor`, `critic`) may override the model-wide strategy and FSDP settings."""
    def pick(key: str, default: Any) -> Any:
        value = _get(hp, f"{role}.{key}") if role else None
        return value if value is not None else _get(hp, f"model.{key}", default)

    return Knobs(dtype=str(_get(hp, "model.dtype", "float32")),
                 checkpointing=bool(_get(hp, "model.enable_gradient_checkpointing", False)),
                 packing=bool(_get(hp, "model.use_remove_padding", True)), lora_rank=lora_rank,
                 strategy=str(pick("strategy", "ddp")),
                 param_offload=bool(pick("fsdp_config.param_offload", False)),
                 optimizer_offload=bool(pick("fsdp_config.optimizer_offload", False)))


def resolve_lora_rank(rank: Any, n_params: int) -> int:
    """As `engine.models.resolve_lora_rank`: `auto` picks by size (< 1B: 32, < 10B: 64, else 128)."""
    if rank == "auto":
        return 32 if n_params < 1_000_000_000 else 64 if n_params < 10_000_000_000 else 128
    return rank if isinstance(rank, int) and not isinstance(rank, bool) and rank > 0 else 0


# --- bytes of one model on one worker ----------------------------------------------------------------

@dataclass
class Memory:
    """Bytes of one role on one worker: on its device, and moved to host memory."""

    weights: float = 0.0
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    host: float = 0.0
    """Offloaded state and rollback snapshots (host memory; on a CPU worker the same memory)."""
    allocator: float = 0.0
    """A CPU worker's allocator slack (`CPU_ALLOCATOR_SLACK`); per worker only."""
    transient: float = 0.0
    """The part of `activations` freed and reallocated within every step (the allocator slack's base)."""
    parameters: int = 0
    trainable_parameters: int = 0

    @property
    def persistent(self) -> float:
        return self.weights + self.gradients + self.optimizer

    @property
    def total(self) -> float:
        return self.persistent + self.activations + self.allocator

    def public(self) -> dict[str, Any]:
        return {"parameters": self.parameters, "trainable_parameters": self.trainable_parameters,
                "weights_bytes": round(self.weights), "gradients_bytes": round(self.gradients),
                "optimizer_bytes": round(self.optimizer), "activations_bytes": round(self.activations),
                "total_bytes": round(self.total), "host_bytes": round(self.host)}


def trained_state(arch: Architecture, k: Knobs, head: str, workers: int, *, snapshot: bool = False) -> Memory:
    """Weights, gradients and optimizer state of a model being trained (activations not included)."""
    c = DTYPE_BYTES.get(k.dtype, FP32)
    total = arch.parameters(head)
    mem = Memory(parameters=total)
    if k.lora_rank:
        trainable = arch.lora_parameters(k.lora_rank) + (arch.hidden_size if head == "score" else 0)
        frozen = total * c  # the base, in the compute dtype
        master = trainable * FP32
    else:
        trainable = total
        frozen = 0.0
        master = trainable * FP32
        if c < FP32:
            frozen = trainable * c  # autocast's compute-dtype copy of every weight in the step
    mem.trainable_parameters = trainable
    grads, moments = trainable * FP32, trainable * FP32 * ADAM_STATES
    if k.strategy == "fsdp2" and workers > 1:
        # Sharded state; two decoder layers (or the embedding) gathered at a time in the compute dtype.
        unit = max(arch.layer_parameters(), arch.vocab_size * arch.hidden_size) * c
        frozen, master = frozen / workers, master / workers
        grads, moments = grads / workers, moments / workers
        if not k.lora_rank:
            frozen = 0.0  # the gathered units replace the per-weight compute copies
        frozen += 2 * unit
    if k.strategy == "fsdp2" and k.param_offload:
        mem.host += master + grads
        master, grads = 0.0, 0.0
    if k.strategy == "fsdp2" and k.optimizer_offload:
        mem.host += moments
        moments = 0.0
    mem.weights, mem.gradients, mem.optimizer = frozen + master, grads, moments
    if snapshot:  # PPO's last good state: trained weights and optimizer state, copied to the CPU
        shard = workers if k.strategy == "fsdp2" and workers > 1 else 1
        mem.host += trainable * FP32 * (1 + ADAM_STATES) / shard
    return mem


def frozen_weights(arch: Architecture, dtype: str, head: str) -> Memory:
    n = arch.parameters(head)
    return Memory(weights=n * DTYPE_BYTES.get(dtype, FP32), parameters=n)


# --- activations ----------------------------------------------------------------------------------------

def layer_bytes_per_token(arch: Architecture, c: int, lora_rank: int = 0) -> float:
    """What one decoder layer keeps for backward, per token (see the module docstring)."""
    h = arch.hidden_size
    norms = 4 * h * FP32  # two RMSNorms: float32 input and normalised output each
    attention = (3 * arch.q_dim + 3 * arch.kv_dim) * c + arch.num_attention_heads * FP32
    mlp = 4 * arch.intermediate_size * c
    return norms + attention + mlp + LORA_TARGETS * lora_rank * c


def padded_attention_bytes(arch: Architecture, k: Knobs, seq: int) -> float:
    """Without packing, a padded micro-batch carries an attention mask, which can send SDPA to its
    math path: a `(heads, seq, seq)` probability matrix per sequence, i.e. `heads * seq` per token
    and layer (an upper bound; packed sequences never build it)."""
    return 0.0 if k.packing else arch.num_attention_heads * seq * DTYPE_BYTES.get(k.dtype, FP32)


def training_activations(arch: Architecture, k: Knobs, tokens: float, head: str, loss: str, seq: int,
                         sp: int = 1) -> float:
    """Peak activation bytes of one forward + backward over `tokens` tokens of sequences of `seq`;
    with Ulysses sequence parallelism over `sp` workers the decoder layers and the LM head's logits
    hold `tokens / sp` each, the gathered hidden states all of them (`engine.runtime.ulysses.head_outputs`)."""
    c = DTYPE_BYTES.get(k.dtype, FP32)
    h, v = arch.hidden_size, arch.vocab_size
    layer = layer_bytes_per_token(arch, c, k.lora_rank) + padded_attention_bytes(arch, k, seq)
    if k.checkpointing:
        kept = arch.num_hidden_layers * h * FP32
        working = layer  # one layer recomputed at a time (its gradients reuse what the forward freed)
    else:
        kept = arch.num_hidden_layers * layer
        working = layer
    if head == "lm":
        logits = v * c + (v * FP32 if c < FP32 else 0)  # the logits, and their float32 copy for the loss
        sharded = logits + LOSS_HEAD_TEMPS[loss] * v * FP32
    else:
        sharded = 2 * FP32
    return tokens / sp * (kept + working + sharded) + tokens * 2 * h * FP32


def training_transient(arch: Architecture, k: Knobs, tokens: float, head: str, loss: str, seq: int,
                       sp: int = 1) -> float:
    """The share of `training_activations` that is not kept for backward: one layer's working set and
    the head."""
    no_layers = Architecture(**{**arch.__dict__, "num_hidden_layers": 0})
    return training_activations(no_layers, k, tokens, head, loss, seq, sp)


def inference_activations(arch: Architecture, dtype: str, tokens: float, head: str) -> float:
    """Peak bytes of a no-grad forward over `tokens` tokens: one layer's working set, the head."""
    c = DTYPE_BYTES.get(dtype, FP32)
    head_bytes = (arch.vocab_size * (c + LOSS_HEAD_TEMPS["inference"] * FP32) if head == "lm"
                  else arch.hidden_size * FP32)
    return tokens * (layer_bytes_per_token(arch, c) + head_bytes)


def generation_activations(arch: Architecture, dtype: str, rows: float, prompt: int, response: int) -> float:
    """Sampling `rows` responses at once: the KV cache of every row at full length, the prefill's
    working set, the sampler's per-vocabulary temporaries."""
    c = DTYPE_BYTES.get(dtype, FP32)
    kv_cache = rows * (prompt + response) * arch.num_hidden_layers * 2 * arch.kv_dim * c
    prefill = rows * prompt * layer_bytes_per_token(arch, c)
    sampling = rows * arch.vocab_size * SAMPLING_BYTES_PER_LOGIT
    return kv_cache + max(prefill, sampling)


def micro_tokens(*, rows: int, seq: int, per_row: int, dynamic: bool, budget: int, size: int) -> float:
    """Tokens in the largest micro-batch of one worker: `rows` rows of up to `seq` tokens per
    sequence, `per_row` sequences per row (2 for preference pairs). A token budget bounds the
    padded (or packed) tokens of a micro-batch, except that one row always fits; otherwise `size`
    rows at a time."""
    row_tokens = per_row * seq
    if rows <= 0:
        return 0.0
    if dynamic:
        return float(min(max(budget, row_tokens), rows * row_tokens))
    return float(min(size, rows) * row_tokens)


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
        method: `sft`, `reward_model`, `rm_distill`, `dpo`, `ppo` or `eval`.
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
    if method == "ppo":
        roles, hints = _ppo_roles(hp, workers, arch, models.get("reward"))
    elif method == "eval":
        roles, hints = _eval_roles(hp, workers, arch, models.get("compare"), models.get("reward"))
    else:
        roles, hints = _supervised_roles(method, hp, workers, arch, models.get("teacher"))
    # Colocated PPO roles share a process: persistent state adds up, activations take the largest (the
    # roles run one after another). Otherwise each role (or phase: a teacher, then the student) alone.
    colocated = (method == "ppo" and colocate) or method == "eval"  # eval's roles are always colocated
    groups = [list(roles)] if colocated else [[name] for name in roles]
    per_worker = max((_combine([roles[n] for n in group]) for group in groups), key=lambda m: m.total + m.host)
    device = "gpu" if gpus > 0 else "cpu"
    if device == "cpu":
        per_worker.allocator = CPU_ALLOCATOR_SLACK * max(roles[n].transient for n in roles)
    runtime = GPU_RUNTIME_BYTES if device == "gpu" else CPU_RUNTIME_BYTES
    fits, param, detail = _fit(per_worker, device, gpus, runtime, capacity, hints, roles)
    return {
        "object": "memory_plan", "method": method, "device": device, "num_workers": workers,
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


def _ppo_roles(hp: Mapping[str, Any], workers: int, arch: Architecture,
               reward: Architecture | None) -> tuple[dict[str, Memory], dict[str, str]]:
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
    return roles, {"activations": _param("actor.", "ppo_max_token_len_per_gpu" if a_dynamic
                                         else "ppo_micro_batch_size_per_gpu")}


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

