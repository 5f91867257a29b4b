"""RolloutWorker: a copy of the policy that only generates, on workers of its own
(`rollout.colocate: false`), fed the trainer's weights by version (`engine.methods.ppo_async`).

Verbs: `generate` (as `ActorRollout.generate`, plus the wall-clock window it ran in, for the idle
metrics), `load_weights` (a version's trained tensors, from the Ray object store or in process), and
for `rollout.weight_sync: collective` `join_weight_group` and `load_broadcast` (a version the
trainer broadcast, `engine.runtime.weight_sync`).
The model is built as the actor's is (same `model` config, same precision), so its log-probs of the
sampled tokens are the behaviour policy's that the actor's own backend would have reported.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from engine.config import PPOConfig
from engine.errors import EngineError
from engine.models import load_policy, load_tokenizer
from engine.roles.actor import policy_rollout
from engine.roles.base import Role
from engine.roles.batch import Batch, build_batch
from engine.rollout.sampling import SamplingParams
from engine.runtime.artifacts import Artifacts
from engine.runtime.precision import Precision
from engine.runtime.weight_sync import Receiver, WeightGroup


class RolloutWorker(Role):
    """Samples from its copy of the policy; the version it holds is the trainer's it was sent.

    Args:
        config: the job's `PPOConfig`.
        model_path: the SFT policy directory (version 0, until weights arrive).
        rollout: backend name (`hf`; `vllm` where the actor's backend is vllm).
        rank, world_size, num_threads, seed, use_gpu, artifacts: see `Role`.
    """

    def __init__(self, config: PPOConfig, model_path: str, *, rollout: str = "hf", rank: int = 0,
                 world_size: int = 1, num_threads: int | None = None, seed: int = 0, use_gpu: bool = False,
                 artifacts: Artifacts | None = None) -> None:
        super().__init__(rank=rank, world_size=world_size, num_threads=num_threads, seed=seed, use_gpu=use_gpu,
                         artifacts=artifacts)
        self.cfg = config
        model_path = self.artifacts.stage(model_path)
        self.tokenizer = load_tokenizer(model_path)
        self.model = load_policy(model_path, config.model, trainable=True).to(self.device)
        # Built trainable as the actor's is: the same tensors carry requires_grad, and the weights
        # fingerprint reads exactly those (no optimizer: nothing here ever steps).
        self.precision = Precision(config.model.dtype, self.device)
        self.rollout = policy_rollout(rollout, self.model, self.tokenizer, model_path, config, seed=seed,
                                      device=self.device)
        self.version = 0
        """The trainer's `weights_version` of the weights held (0: the ones loaded from `model_path`)."""
        self.receiver: Receiver | None = None

    def join_weight_group(self, endpoint: tuple[str, int], rank: int, world_size: int) -> str:
        """Join the trainer's weight-sync group as `rank` (>= 1); returns the backend (gloo, nccl)."""
        self.receiver = Receiver(WeightGroup(endpoint, rank, world_size, self.device), self.model)
        return self.receiver.group.backend

    def load_broadcast(self, seq: int) -> dict[str, Any]:
        """Apply the trainer's broadcast number `seq` (waiting for it to arrive), as `load_weights`."""
        start = time.perf_counter()
        if self.receiver is None:
            raise EngineError("weight sync: this rollout worker joined no weight-sync group", code="weight_sync_failed")
        version, state = self.receiver.take(seq)
        out = self.load_weights({"state": state, "version": version})
        return {**out, "time_s": time.perf_counter() - start}

    def load_weights(self, weights: Mapping[str, Any]) -> dict[str, Any]:
        """Take `weights` (`ActorRollout.export_weights`): its tensors replace this copy's and its
        version stamps what is sampled next. Returns the fingerprint of what is now held."""
        start = time.perf_counter()
        own = dict(self.model.named_parameters())
        own.update(dict(self.model.named_buffers()))
        missing = [k for k in weights["state"] if k not in own]
        if missing:
            raise EngineError(f"weight sync: the rollout worker's model has no tensor {missing[0]!r}",
                              code="weight_sync_failed", data={"missing": missing[:5]})
        with torch.no_grad():
            for name, tensor in weights["state"].items():
                own[name].copy_(tensor.to(own[name].device, own[name].dtype))
        self.rollout.sync_weights(self.model)
        self.version = int(weights["version"])
        return {"fingerprint": self.rollout.fingerprint, "version": self.version,
                "time_s": time.perf_counter() - start}

    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int]) -> tuple[Batch, dict[str, float]]:
        """One response per prompt with the training sampling parameters, stamped with the version
        held. Returns the batch (with `rollout_log_probs`: the behaviour policy's) and the wall-clock
        window it ran in (`start`, `end`, `seconds`)."""
        began, start = time.time(), time.perf_counter()
        r, width = self.cfg.rollout, self.cfg.data.max_response_length
        params = SamplingParams(max_new_tokens=width, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                                do_sample=r.do_sample)
        with self.precision.autocast():
            responses = self.rollout.generate(prompts, seeds, params)
        batch = build_batch(prompts, responses, prompt_width=self.cfg.data.max_prompt_length, response_width=width,
                            pad_id=self.tokenizer.pad_token_id)
        fingerprint = float(self.rollout.fingerprint or 0.0)
        batch["policy_version"] = torch.tensor([[float(self.version), fingerprint]] * len(responses),
                                               dtype=torch.float64)
        lp = torch.zeros(len(responses), width, dtype=torch.float32)
        for i, row in enumerate(self.rollout.last_log_probs or []):
            lp[i, :len(row)] = torch.as_tensor(row, dtype=torch.float32)
        batch["rollout_log_probs"] = lp
        seconds = time.perf_counter() - start
        return batch, {"start": began, "end": began + seconds, "seconds": seconds}

