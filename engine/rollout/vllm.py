"""The `vllm` rollout backend (the optional `gpu` extra): a vLLM engine in the actor's process, joined
to its process group; after each actor update the weights are pushed into it (the adapter alone when
training LoRA) and its prefix cache is reset; between rollouts it sleeps so training has the GPU
memory. `vllm` is imported only when this backend is built, never at module import.

Written against vLLM 0.8.5 - 0.11 (the `gpu` extra pins that range), as VERL's SPMD rollout used it:
`LLM(distributed_executor_backend="external_launcher")` joins the torch.distributed group this
process already has (Keel's: one engine per data-parallel worker, tensor parallel 1) instead of
spawning its own workers; `enable_sleep_mode` + `LLM.sleep(level=1)` / `LLM.wake_up(tags=...)`
hand the GPU memory back to training between rollouts; `LLM.reset_prefix_cache()` drops cached
KV blocks computed with old weights; the model object is reached in-process through
`llm.llm_engine.model_executor.driver_worker.worker.model_runner.model` (V1 engine core in this
process: VLLM_ENABLE_V1_MULTIPROCESSING=0).
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
from typing import Any

import torch

from engine.config import PPOConfig
from engine.errors import EngineError
from engine.rollout.sampling import SamplingParams, weights_fingerprint

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
