"""Sampler: a frozen policy that only draws responses (evaluation's policy and `compare_to`).

Verb: `generate`, as `ActorRollout.generate` but without an optimizer, gradients or float32 master
weights: the model is held in `model.dtype` and sampled with the `hf` backend.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from engine.config import EvalConfig, ModelConfig
from engine.models import load_policy, load_tokenizer
from engine.roles.base import Role
from engine.roles.batch import Batch, build_batch
from engine.rollout.hf import HFRollout
from engine.rollout.sampling import SamplingParams, eos_token_ids
from engine.runtime.artifacts import Artifacts


class Sampler(Role):
    """Samples from the causal LM at `model_path`.

    Args:
        config: the job's `EvalConfig` (`model.dtype`, `rollout.*`, the data lengths).
        model_path: a model directory (or hub id), staged by this worker.
        rank, world_size, num_threads, seed, use_gpu, artifacts: see `Role`.
    """

    def __init__(self, config: EvalConfig, model_path: str, *, rank: int = 0, world_size: int = 1,
                 num_threads: int | None = None, seed: int = 0, use_gpu: bool = False,
                 artifacts: Artifacts | None = None) -> None:
        super().__init__(rank=rank, world_size=world_size, num_threads=num_threads, seed=seed, use_gpu=use_gpu,
                         artifacts=artifacts)
        self.cfg = config
        model_path = self.artifacts.stage(model_path)
        self.tokenizer = load_tokenizer(model_path)
        self.model = load_policy(model_path, ModelConfig(dtype=config.model.dtype), trainable=False).to(self.device)
        self.rollout = HFRollout(self.model, self.tokenizer.pad_token_id, eos_token_ids(self.tokenizer, self.model))
        r = config.rollout
        self.params = SamplingParams(max_new_tokens=config.data.max_response_length, temperature=r.temperature,
                                     top_p=r.top_p, top_k=r.top_k, do_sample=r.temperature > 0)

    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int]) -> tuple[Batch, float]:
        """One response per prompt (`seeds[i]` fixes row i's draw).

        Returns:
            `(batch, seconds)`: a `Batch` (`engine.roles.batch`) and the wall time, as two values so
            the batch can go to the reward role by reference.
        """
        start = time.perf_counter()
        responses = self.rollout.generate(prompts, seeds, self.params)
        batch = build_batch(prompts, responses, prompt_width=self.cfg.data.max_prompt_length,
                            response_width=self.cfg.data.max_response_length, pad_id=self.tokenizer.pad_token_id)
        return batch, time.perf_counter() - start
