"""Teacher: the frozen model whose per-token log-probs on the student's samples give on-policy
distillation its reward (`distill_policy`: reward -(log p_student - log p_teacher), the reverse KL).

Verb: `compute_teacher_log_prob`. Log-probs are cached per batch (keyed by its token ids), so a batch
scored again (a retried step, a further generation batch of dynamic sampling) costs no forward. The
teacher must share the student's tokenizer: it scores the student's token ids as they are.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Any

import torch

from engine.config import PPOConfig
from engine.models import load_reference
from engine.roles.base import Role
from engine.roles.batch import Batch
from engine.roles.forward import role_log_probs
from engine.runtime.artifacts import Artifacts
from engine.runtime.precision import autocast

CACHED_BATCHES = 4
"""Batches whose teacher log-probs stay cached (a step's batches; older ones are not scored again)."""


class Teacher(Role):
    """The model at `model_path`, frozen, in the student's precision (no adapter of the student's)."""

    def __init__(self, config: PPOConfig, model_path: str, *, rank: int = 0, world_size: int = 1,
                 num_threads: int | None = None, seed: int = 0, use_gpu: bool = False,
                 artifacts: Artifacts | None = None) -> None:
        super().__init__(rank=rank, world_size=world_size, num_threads=num_threads, seed=seed, use_gpu=use_gpu,
                         artifacts=artifacts)
        self.cfg = config
        own = dataclasses.replace(config.model, lora_rank=0, lora_adapter_path=None)
        self.model = load_reference(self.artifacts.stage(model_path), own).to(self.device)
        self.cache: dict[str, torch.Tensor] = {}
        self.hits = 0

    def compute_teacher_log_prob(self, batch: Batch) -> dict[str, Any]:
        """`log_probs`: `(batch, R)` the teacher's log-probs of the response tokens (0 on padding),
        at the sampling temperature (as the student's are); `cached`: True when they were."""
        start = time.perf_counter()
        key = hashlib.sha256(batch["input_ids"].numpy().tobytes()
                             + batch["response_mask"].numpy().tobytes()).hexdigest()
        cached = key in self.cache
        if cached:
            self.hits += 1
            log_probs = self.cache[key]
        else:
            with autocast(self.device, self.cfg.model.dtype):
                log_probs = role_log_probs(self.model, batch, self.cfg, self.device)
            self.cache[key] = log_probs
            while len(self.cache) > CACHED_BATCHES:
                self.cache.pop(next(iter(self.cache)))
        return {"log_probs": log_probs, "cached": cached, "time_s": time.perf_counter() - start}
