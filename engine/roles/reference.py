"""Reference: the frozen SFT policy whose log-probs anchor the KL penalty.

Used for full fine-tuning only: with LoRA the actor computes reference log-probs itself with its
adapter disabled (`ActorRollout.compute_ref_log_prob`), so the base weights exist once.
"""

from __future__ import annotations

import time
from typing import Any

from engine.config import PPOConfig
from engine.models import load_reference
from engine.roles.base import Role
from engine.roles.batch import Batch
from engine.roles.forward import role_log_probs
from engine.runtime.artifacts import Artifacts
from engine.runtime.precision import autocast


class Reference(Role):
    """A frozen copy of the policy at `model_path` (no adapter)."""

    def __init__(self, config: PPOConfig, model_path: str, *, rank: int = 0, world_size: int = 1,
                 num_threads: int | None = None, seed: int = 0, use_gpu: bool = False,
                 artifacts: Artifacts | None = None) -> None:
        super().__init__(rank=rank, world_size=world_size, num_threads=num_threads, seed=seed, use_gpu=use_gpu,
                         artifacts=artifacts)
        self.cfg = config
        # The actor's precision path (float32 weights under its autocast): KL is exactly 0 at step 0.
        self.model = load_reference(self.artifacts.stage(model_path), config.model).to(self.device)

    def after_process_group(self) -> None:
        self._sequence_parallel(self.model, self.cfg.ref.ulysses_sequence_parallel_size,
                                "ref.ulysses_sequence_parallel_size")

    def compute_ref_log_prob(self, batch: Batch) -> dict[str, Any]:
        """`log_probs`: `(batch, R)` response log-probs under the reference policy."""
        start = time.perf_counter()
        with autocast(self.device, self.cfg.model.dtype):
            log_probs = role_log_probs(self.model, batch, self.cfg, self.device)
        return {"log_probs": log_probs, "time_s": time.perf_counter() - start}
