"""The `hf` rollout backend: batched sampling on the training model itself with a KV cache, stopping
at EOS, with temperature / top-p / top-k. Nothing to synchronise: it reads the live weights.

It decodes with `engine.rollout.decode` where that module takes the model, else with the
transformers forward.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from engine.data import pad
from engine.rollout import decode
from engine.rollout.sampling import M32, SamplingParams, sample_tokens, weights_fingerprint


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
        seed_t = torch.tensor([s & M32 for s in seeds], dtype=torch.int64, device=device)
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
