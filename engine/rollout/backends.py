"""Rollout backends: sample responses from the current policy, behind one small interface.

- `hf` (default): batched sampling on the training model itself with a KV cache, stopping at EOS,
  with temperature / top-p / top-k. Nothing to synchronise: it reads the live weights.
- `vllm` (the optional `gpu` extra): a vLLM engine in the actor's process, joined to its process
  group; after each actor update the weights are pushed into it (the adapter alone when training
  LoRA) and its prefix cache is reset; between rollouts it sleeps so training has the GPU memory.
  `vllm` is imported only when this backend is built, never at module import.

Sampling is counter-based: row `i` at step `t` draws its token by inverting its distribution's
CDF at one uniform that is a hash of (`seeds[i]`, `t`), so a row's sample depends only on its seed
and its logits, not on which other rows share the batch or on any global RNG state. Splitting a
batch across data-parallel workers, or resuming a job, therefore draws the same responses.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from engine.config import PPOConfig
from engine.data import pad
from engine.errors import EngineError
from engine.rollout import decode

_M32 = 0xFFFFFFFF
_MIX = 0x45D9F3B
"""Multiplier of a well-mixing 32-bit integer hash; small enough that products fit in int64."""


@dataclass(frozen=True)
class SamplingParams:
    """How to decode (VERL `actor_rollout_ref.rollout` names)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    """-1 disables top-k."""
    do_sample: bool = True

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature <= 0


class RolloutBackend(Protocol):
    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int],
                 params: SamplingParams) -> list[list[int]]:
        """One response per prompt: generated token ids, ending with EOS unless cut at
        `max_new_tokens`; `seeds[i]` fixes row `i`'s randomness."""

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the backend sample from `model`'s current weights (and set `fingerprint`)."""

    fingerprint: float | None
    """`weights_fingerprint` of the weights the backend samples from, as of its last sync."""
    syncs: int
    """Weight syncs done so far (the rollout batches' policy version counts from it)."""
    last_log_probs: list[list[float]] | None
    """The last `generate`'s log-probs of each sampled token (None: greedy, or not measured)."""


def weights_fingerprint(model: torch.nn.Module) -> float:
    """A cheap fingerprint of the weights being trained (a LoRA model's: the adapter, its delta):
    per trainable tensor (this worker's shard under fsdp2) its float64 sum and absolute sum, mixed
    with the tensor's position. One device sync; any optimizer step changes it. Rollout batches
    carry it, so a batch sampled from weights the trainer no longer holds is refused."""
    sums = []
    for p in model.parameters():
        if p.requires_grad:
            t = p.detach()
            t = t.to_local() if hasattr(t, "to_local") else t
            t = t.double()
            sums.append(t.sum() + 0.5 * t.abs().sum())
    if not sums:
        return 0.0
    stacked = torch.stack(sums)
    weights = torch.arange(1, len(sums) + 1, dtype=torch.float64, device=stacked.device).reciprocal_().add_(1.0)
    return float((stacked * weights).sum())


# --- counter-based sampling ----------------------------------------------------------------------

def mix32(x: Any) -> Any:
    """A 32-bit integer hash (works on Python ints and int64 tensors holding values < 2**32)."""
    x = ((x >> 16) ^ x) * _MIX & _M32
    x = ((x >> 16) ^ x) * _MIX & _M32
    return (x >> 16) ^ x


def row_seed(*parts: int) -> int:
    """Combine integers (job seed, batch number, row...) into one 32-bit row seed."""
    h = 0x12345678
    for p in parts:
        h = mix32((h ^ mix32(p & _M32)) + 0x9E3779B9 & _M32)
    return h


def row_uniforms(seeds: torch.Tensor, step: int) -> torch.Tensor:
    """`(batch,)` float64 uniforms in (0, 1), a pure function of (seed, step): 2**32 evenly spaced
    values, each the midpoint of its cell, so neither end is reachable."""
    key = mix32((mix32(seeds & _M32) + step * 0x9E3779B) & _M32)
    return key.double().add_(0.5).div_(2.0**32)


def filter_logits(logits: torch.Tensor, top_k: int = -1, top_p: float = 1.0) -> torch.Tensor:
    """Set to -inf the logits outside the top-k and outside the smallest nucleus of mass >= top_p."""
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the mass strictly before it already reaches top_p (the first always stays).
        drop_sorted = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_tokens(logits: torch.Tensor, seeds: torch.Tensor, step: int, params: SamplingParams) -> torch.Tensor:
    """Next token per row: argmax when greedy, else an exact sample of softmax(logits / T) over the
    filtered set, by inverse CDF: the first token whose cumulative mass exceeds `u * total`, `u` from
    `row_uniforms`. One hash per row where the Gumbel-max trick needs one per vocabulary entry and two
    logarithms each (about a third of a sampled decode step on a small model)."""
    if params.greedy:
        return logits.argmax(dim=-1)
    scaled = logits.float() if params.temperature == 1.0 else logits.float() / params.temperature
    scaled = filter_logits(scaled, params.top_k, params.top_p)
    # float64 cumulative mass: the CDF's steps stay exact to the probabilities' own rounding, and a
    # filtered token (probability 0) is a zero-width step that no `u` lands on.
    cdf = torch.softmax(scaled, dim=-1).cumsum(dim=-1, dtype=torch.float64)
    target = row_uniforms(seeds, step).mul_(cdf[:, -1])
    token = torch.searchsorted(cdf, target[:, None], right=True)[:, 0]
    return token.clamp_(max=logits.shape[-1] - 1)


# --- hf -----------------------------------------------------------------------------------------

class HFRollout:
    """Batched KV-cache sampling with the training model (`transformers` forward, left-padded prompts).

    Args:
        model: the policy (plain or PEFT); sampled from in eval mode, its mode restored afterwards.
        pad_token_id: filler after a row has stopped.
        eos_token_ids: ids that end a response (kept as its last token).
        max_batch_size: rows per forward (None: all at once).
        lean: decode with `engine.rollout.decode` where it supports the model (same logits to float
            rounding, far fewer ops per token); False, or a model it refuses: the transformers forward.
    """

    def __init__(self, model: torch.nn.Module, pad_token_id: int, eos_token_ids: Sequence[int],
                 max_batch_size: int | None = None, lean: bool = True) -> None:
        self.model = model
        self.pad_token_id = int(pad_token_id)
        self.eos_token_ids = sorted({int(e) for e in eos_token_ids})
        self.max_batch_size = max_batch_size
        self.lean = lean
        self.fingerprint: float | None = None  # set by `make_rollout` and each sync
        self.syncs = 0
        self.last_log_probs: list[list[float]] | None = None

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model
        self.fingerprint = weights_fingerprint(model)
        self.syncs += 1

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int],
                 params: SamplingParams) -> list[list[int]]:
        if len(prompts) != len(seeds):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")
        if not prompts:
            return []
        step = self.max_batch_size or len(prompts)
        was_training = self.model.training
        self.model.eval()
        try:
            out: list[list[int]] = []
            log_probs: list[list[float]] = []
            for start in range(0, len(prompts), step):
                responses, lps = self._generate(prompts[start:start + step], seeds[start:start + step], params)
                out += responses
                log_probs += lps
            self.last_log_probs = None if params.greedy else log_probs
            return out
        finally:
            self.model.train(was_training)

    def _generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int],
                  params: SamplingParams) -> tuple[list[list[int]], list[list[float]]]:
        device = next(self.model.parameters()).device
        input_ids, mask = pad(prompts, self.pad_token_id, side="left")
        input_ids, mask = input_ids.to(device), mask.to(device)
        seed_t = torch.tensor([s & _M32 for s in seeds], dtype=torch.int64, device=device)
        eos = torch.tensor(self.eos_token_ids, device=device)
        finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=device)
        lean = self.lean and decode.supports(self.model)
        decoder = decode.Decoder(self.model) if lean else _TransformersDecoder(self.model)
        logits = decoder.prefill(input_ids, mask, params.max_new_tokens)
        tokens, token_log_probs = [], []
        for t in range(params.max_new_tokens):
            token = sample_tokens(logits, seed_t, t, params)
            if not params.greedy:  # the sampler's own log-prob (unfiltered softmax(logits / T), as trained)
                token_log_probs.append(torch.log_softmax(logits.float() / params.temperature, dim=-1)
                                       .gather(-1, token[:, None])[:, 0])
            token = torch.where(finished, self.pad_token_id, token)
            tokens.append(token)
            finished = finished | torch.isin(token, eos)
            if t == params.max_new_tokens - 1 or bool(finished.all()):
                break
            logits = decoder.step(token)
        rows = torch.stack(tokens, dim=1).tolist()
        lp_rows = torch.stack(token_log_probs, dim=1).tolist() if token_log_probs else [[] for _ in rows]
        eos_set = set(self.eos_token_ids)
        responses, log_probs = [], []
        for row, lps in zip(rows, lp_rows):
            end = next((j + 1 for j, tok in enumerate(row) if tok in eos_set), len(row))
            responses.append(row[:end])
            log_probs.append(lps[:end])
        return responses, log_probs


class _TransformersDecoder:
    """The transformers forward behind `engine.rollout.decode.Decoder`'s interface (`prefill`, then `step`
    per sampled token), for models that module does not take."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def prefill(self, input_ids: torch.Tensor, mask: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        device = input_ids.device
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        batch, width = input_ids.shape
        self.cache_kw, extra = _forward_kwargs(self.model)
        self.static = _static_cache(self.model, width + max_new_tokens)
        if self.static is not None:  # the mask covers the whole cache from the start; a step fills one slot
            mask = torch.cat([mask, mask.new_zeros(batch, max_new_tokens)], dim=1)
            extra = {**extra, self.cache_kw: self.static, "cache_position": torch.arange(width, device=device)}
        self.out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                              **extra)
        self.mask, self.width, self.t = mask, width, 0
        self.next_pos = positions[:, -1] + 1
        return self.out.logits[:, -1, :]

    def step(self, token: torch.Tensor) -> torch.Tensor:
        if self.static is not None:
            self.mask[:, self.width + self.t] = 1
            step_kw = {self.cache_kw: self.static,
                       "cache_position": torch.tensor([self.width + self.t], device=token.device)}
        else:
            self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
            cache = getattr(self.out, "cache", None)
            step_kw = {self.cache_kw: self.out.past_key_values if cache is None else cache}
        self.out = self.model(input_ids=token[:, None], attention_mask=self.mask,
                              position_ids=self.next_pos[:, None], use_cache=True, **step_kw)
        self.next_pos = self.next_pos + 1
        self.t += 1
        return self.out.logits[:, -1, :]


def _static_cache(model: torch.nn.Module, length: int) -> Any:
    """A KV cache of `length` positions allocated once per generation (transformers' `StaticCache`),
    or None where this transformers or model has none (then the cache grows step by step). A growing
    cache concatenates every layer's keys and values at every step, copying O(length^2) in all:
    about a fifth of generation's CPU time on the demo model (bench.ppo, GRPO workload)."""
    try:
        from transformers import StaticCache
    except ImportError:
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base.config, "is_encoder_decoder", False):
        return None
    try:
        return StaticCache(config=base.config, max_cache_len=length)
    except (TypeError, ValueError):  # an older signature (max_batch_size, device, dtype up front)
        return None


def _forward_kwargs(model: torch.nn.Module) -> tuple[str, dict[str, Any]]:
    """The name of the KV-cache argument (`cache` in transformers 5, `past_key_values` before) and
    `logits_to_keep=1` where supported, so the prefill does not build `(batch, prompt, vocab)` logits."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(base.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    return cache_kw, ({"logits_to_keep": 1} if "logits_to_keep" in params else {})


# --- vllm (optional) -----------------------------------------------------------------------------
#
# Written against vLLM 0.8.5 - 0.11 (the `gpu` extra pins that range), as VERL's SPMD rollout used it:
# `LLM(distributed_executor_backend="external_launcher")` joins the torch.distributed group this
# process already has (Keel's: one engine per data-parallel worker, tensor parallel 1) instead of
# spawning its own workers; `enable_sleep_mode` + `LLM.sleep(level=1)` / `LLM.wake_up(tags=...)`
# hand the GPU memory back to training between rollouts; `LLM.reset_prefix_cache()` drops cached
# KV blocks computed with old weights; the model object is reached in-process through
# `llm.llm_engine.model_executor.driver_worker.worker.model_runner.model` (V1 engine core in this
# process: VLLM_ENABLE_V1_MULTIPROCESSING=0).

VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
"""The `max_lora_rank` values vLLM's LoRA config accepts."""
_SLEEP_TAGS = ("weights", "kv_cache")


def vllm_available() -> bool:
    """True when the `vllm` package is installed and a CUDA device is visible."""
    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


def adapter_lora_rank(adapter_dir: str) -> int:
    """The rank `r` of the PEFT adapter in `adapter_dir` (its `adapter_config.json`)."""
    path = os.path.join(adapter_dir, "adapter_config.json")
    try:
        with open(path) as f:
            rank = json.load(f).get("r")
    except (OSError, ValueError) as err:
        raise EngineError(f"cannot read the LoRA rank from {path}: {err}", code="invalid_model",
                          param="model.lora_adapter_path") from None
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise EngineError(f"{path} has no positive integer rank `r` (got {rank!r})", code="invalid_model",
                          param="model.lora_adapter_path")
    return rank


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds an adapter of rank `rank`."""
    for allowed in VLLM_LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise EngineError(f"LoRA rank {rank} is above vLLM's largest ({VLLM_LORA_RANKS[-1]}); "
                      "use rollout.name='hf'", code="invalid_config", param="model.lora_rank")


def _adapter_and_base(config: PPOConfig, model_path: str) -> tuple[str | None, str]:
    """(adapter directory or None, base model path) as `engine.models.load_policy` reads them."""
    if os.path.isfile(os.path.join(model_path, "adapter_config.json")):
        from engine.models import adapter_base

        return model_path, adapter_base(model_path)
    return config.model.lora_adapter_path, model_path


def vllm_engine_kwargs(config: PPOConfig, *, model_path: str, lora_rank: int, seed: int,
                       max_model_len: int | None = None) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM` for the actor's rollout engine.

    Args:
        config: the job's config (`model.dtype`, `rollout.*`, the data lengths).
        model_path: what the actor loaded: a model directory, or an adapter directory (the engine
            then loads the adapter's base, and serves the adapter).
        lora_rank: the actor's resolved LoRA rank; 0 with an adapter to continue from means "the
            adapter's own rank" (read from its adapter_config.json).
        max_model_len: prompt + response tokens (default: the data lengths).
    """
    adapter, base = _adapter_and_base(config, model_path)
    rank = lora_rank or (adapter_lora_rank(adapter) if adapter else 0)
    r = config.rollout
    kwargs: dict[str, Any] = {
        "model": base,
        "dtype": config.model.dtype,
        "seed": seed,
        "max_model_len": max_model_len or config.data.max_prompt_length + config.data.max_response_length,
        # One engine per rollout worker; with tensor parallelism it spreads over that worker's GPUs
        # (its own processes: external_launcher would make the job's other workers its TP peers).
        "distributed_executor_backend": "external_launcher" if r.tensor_model_parallel_size == 1 else "mp",
        "tensor_parallel_size": r.tensor_model_parallel_size,
        "gpu_memory_utilization": r.gpu_memory_utilization,
        "enforce_eager": r.enforce_eager,
        "enable_sleep_mode": r.free_cache_engine,
        "enable_prefix_caching": True,
        "disable_log_stats": True,
        "trust_remote_code": False,
    }
    if rank:
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=vllm_max_lora_rank(rank))
    return kwargs


class AdapterVersions:
    """Where the adapter of each weight sync is written: `root/v<N>`, only the newest kept (an engine
    reads an adapter lazily at the next generation, so the directory must outlive its sync, but no
    older one is ever read again). The root is removed when this object is collected or at exit."""

    def __init__(self, root: str | None = None) -> None:
        self.root = root or tempfile.mkdtemp(prefix="keel-vllm-lora-")
        self.version = 0
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, True)

    def next(self) -> tuple[int, str]:
        """(version, directory) for the next adapter; the caller writes it, then calls `prune`."""
        self.version += 1
        return self.version, os.path.join(self.root, f"v{self.version}")

    def prune(self) -> None:
        """Remove every adapter directory but the newest."""
        keep = f"v{self.version}"
        for name in os.listdir(self.root):
            if name != keep:
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)


def join_process_group(device: torch.device) -> None:
    """Make sure this process is in a torch.distributed group before vLLM starts, and tell vLLM's
    external launcher where it is (the torchrun variables it reads). Data-parallel workers already
    joined Keel's group; a single worker gets a group of one."""
    import torch.distributed as dist

    from engine.runtime import distributed

    if not dist.is_initialized():
        distributed.init_process_group(0, 1, distributed.rendezvous(), device)
    # Every worker sees its own GPU as device 0 (Ray sets CUDA_VISIBLE_DEVICES).
    os.environ.update(RANK=str(dist.get_rank()), WORLD_SIZE=str(dist.get_world_size()), LOCAL_RANK="0")


class VLLMRollout:
    """Sampling with a vLLM engine in the actor's process (GPU only).

    The engine starts at the first generation, not here: data-parallel workers join Keel's process
    group after their roles are built, and vLLM must find that group (it joins it rather than
    making its own). `sync_weights` pushes the trainer's weights after each update: the full state
    dict for full fine-tuning, the adapter alone for LoRA (written to a fresh directory and served
    as a new `LoRARequest`; the previous adapter is dropped from the engine and from disk). Every
    sync resets the prefix cache. With `free_cache_engine` the engine sleeps (level 1: KV cache
    freed, weights moved to CPU) after each generation and wakes its weights for the next sync and
    its KV cache for the next generation. Per-row seeds make sampling reproducible as with `hf`,
    though not bit-identical to it.

    Args:
        engine_kwargs: `vllm_engine_kwargs(...)`.
        device: the actor's device (the process group is created on it when there is none).
    """

    def __init__(self, engine_kwargs: dict[str, Any], *, device: torch.device | None = None) -> None:
        self.engine_kwargs = dict(engine_kwargs)
        self.device = device or torch.device("cuda", 0)
        self.free_cache_engine = bool(engine_kwargs.get("enable_sleep_mode"))
        self._llm: Any = None
        self._asleep: set[str] = set()
        self._adapters = AdapterVersions()
        self._lora_request: Any = None
        self._adapter_digest: str | None = None
        self.fingerprint: float | None = None
        self.syncs = 0
        self.last_log_probs: list[list[float]] | None = None  # not measured on vllm yet

    @property
    def llm(self) -> Any:
        if self._llm is None:
            # In-process engine core: the weight sync needs the model object in this process.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            join_process_group(self.device)
            from vllm import LLM

            self._llm = LLM(**self.engine_kwargs)
        return self._llm

    # sleep mode
    def _sleep(self) -> None:
        if self.free_cache_engine and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = set(_SLEEP_TAGS)

    def _wake(self, tags: Sequence[str]) -> None:
        todo = [t for t in tags if t in self._asleep]
        if not todo:
            return
        if "tags" in inspect.signature(self.llm.wake_up).parameters:
            self.llm.wake_up(tags=todo)  # weights first, KV cache only when generating
            self._asleep -= set(todo)
        else:
            self.llm.wake_up()
            self._asleep = set()

    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int],
                 params: SamplingParams) -> list[list[int]]:
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        sampling = [VSamplingParams(
            n=1, max_tokens=params.max_new_tokens, seed=int(seed),
            temperature=0.0 if params.greedy else params.temperature,
            top_p=params.top_p, top_k=params.top_k if params.top_k > 0 else -1) for seed in seeds]
        self._wake(_SLEEP_TAGS)
        try:
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sampling,
                                        lora_request=self._lora_request, use_tqdm=False)
        finally:
            self._sleep()  # training gets the memory back
        return [list(o.outputs[0].token_ids) for o in outputs]

    def sync_weights(self, model: torch.nn.Module) -> None:
        from engine.models import is_lora

        if is_lora(model):
            from vllm.lora.request import LoRARequest

            version, path = self._adapters.next()
            self.write_adapter(model, path)
            old = self._lora_request
            self._lora_request = LoRARequest(f"actor-v{version}", version, path)
            self._adapters.prune()
            if self._llm is None:  # not started yet: it will load this adapter at its first generation
                return
            remove = getattr(self._llm.llm_engine, "remove_lora", None)
            if old is not None and remove is not None:
                remove(old.lora_int_id)
        else:
            self._wake(("weights",))
            self._engine_model().load_weights(_full_weights(model))
            self.fingerprint = weights_fingerprint(model)
            self.syncs += 1
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def write_adapter(self, model: torch.nn.Module, path: str) -> None:
        """Write `model`'s adapter for the engine to `path`; an adapter identical to the previous one
        while the trained adapter changed is an error, not a no-op: sampling would go on from the
        old policy and train nothing (verl #7495, unsloth #8701)."""
        model.save_pretrained(path, safe_serialization=True)
        fingerprint, digest = weights_fingerprint(model), _adapter_digest(path)
        if digest == self._adapter_digest and fingerprint != self.fingerprint:
            raise EngineError("the LoRA weight sync left the rollout model unchanged: the adapter written for "
                              "the engine is identical to the previous one while the trained adapter changed",
                              code="weight_sync_failed")
        self.fingerprint, self._adapter_digest = fingerprint, digest
        self.syncs += 1

    def _engine_model(self) -> Any:
        """The vLLM model object, wherever this vLLM version keeps it."""
        executor = self.llm.llm_engine.model_executor
        for path in ("driver_worker.worker.model_runner.model", "driver_worker.model_runner.model"):
            obj: Any = executor
            try:
                for attr in path.split("."):
                    obj = getattr(obj, attr)
                return obj
            except AttributeError:
                continue
        raise EngineError("cannot reach the vLLM model to update its weights; use rollout.name='hf'",
                          code="rollout_unavailable")


_WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
"""Module-name parts that FSDP, activation checkpointing and torch.compile insert into parameter
names; vLLM's `load_weights` expects the Hugging Face names."""


def _adapter_digest(path: str) -> str:
    """sha256 of the adapter weights file PEFT wrote in `path`."""
    import hashlib

    digest = hashlib.sha256()
    with open(os.path.join(path, "adapter_model.safetensors"), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _full_weights(model: torch.nn.Module) -> Any:
    """`(name, tensor)` pairs of `model`'s state dict under Hugging Face names, sharded (DTensor)
    weights gathered whole (every data-parallel worker calls this, in the same order)."""
    for name, tensor in model.state_dict().items():
        for part in _WRAPPER_PREFIXES:
            name = name.replace(part, "")
        full = getattr(tensor, "full_tensor", None)
        yield name, (full() if full is not None else tensor).detach()


def make_rollout(name: str, model: torch.nn.Module, *, tokenizer: Any, model_path: str, dtype: str,
                 lora_rank: int, max_model_len: int, seed: int, config: PPOConfig | None = None,
                 device: torch.device | None = None) -> RolloutBackend:
    """The backend called `name` (`hf` or `vllm`) for `model`; `config` carries the vllm knobs
    (`rollout.enforce_eager`, `free_cache_engine`, `gpu_memory_utilization`, `model.lora_adapter_path`)."""
    if name == "vllm":
        from engine.config import ModelConfig
        from engine.models import is_lora

        if config is None:
            config = PPOConfig(model=ModelConfig(dtype=dtype))
        kwargs = vllm_engine_kwargs(config, model_path=model_path, lora_rank=lora_rank, seed=seed,
                                    max_model_len=max_model_len)
        backend = VLLMRollout(kwargs, device=device)
        if is_lora(model):  # the engine loaded the base weights; serve the adapter from the start
            backend.sync_weights(model)
        else:  # the engine loads the same weights from model_path
            backend.fingerprint = weights_fingerprint(model)
        return backend
    if name != "hf":
        raise EngineError(f"unknown rollout backend {name!r}", code="invalid_config")
    backend = HFRollout(model, tokenizer.pad_token_id, eos_token_ids(tokenizer, model))
    backend.fingerprint = weights_fingerprint(model)
    return backend


def eos_token_ids(tokenizer: Any, model: torch.nn.Module | None = None) -> list[int]:
    """The tokenizer's EOS plus any in the model's generation config."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None)
    if isinstance(extra, int):
        ids.add(extra)
    elif isinstance(extra, list | tuple):
        ids.update(int(e) for e in extra)
    if not ids:
        raise EngineError("the tokenizer has no EOS token: responses could never stop", code="invalid_model")
    return sorted(ids)
