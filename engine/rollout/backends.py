"""Rollout backends: sample responses from the current policy, behind one small interface
(`RolloutBackend`), built by name (`make_rollout`).

- `hf` (default, `engine.rollout.hf`): batched sampling on the training model itself with a KV
  cache. Nothing to synchronise: it reads the live weights.
- `vllm` (the optional `gpu` extra, `engine.rollout.vllm`): a vLLM engine in the actor's process;
  after each actor update the weights are pushed into it.

Both draw tokens the same counter-based way (`engine.rollout.sampling`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from engine.config import PPOConfig
from engine.errors import EngineError
from engine.rollout.hf import HFRollout
from engine.rollout.sampling import SamplingParams, eos_token_ids, weights_fingerprint
from engine.rollout.vllm import VLLMRollout, vllm_engine_kwargs


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
