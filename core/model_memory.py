"""Bytes of one model on one worker, for the memory plan: the job's knobs that shape them, trained
state (weights, gradients, AdamW moments, offload, snapshots), frozen weights, and the activations of
training, no-grad passes and generation (what `core.memory_plan` adds up per role)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.model_shape import Architecture

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
