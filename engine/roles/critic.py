"""Critic: the value model `V(s_t)` for GAE, trained with the clipped value loss.

It starts from the policy's weights with a fresh scalar head (the same class and format as a
reward model, `engine.models.load_value_model`). Verbs: `compute_values`, `update_critic`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import torch

from engine import packing
from engine.algos import masked_mean, value_loss
from engine.config import PPOConfig
from engine.models import load_tokenizer, load_value_model, token_values
from engine.roles.actor import loss_weight, mini_batch_totals
from engine.roles.base import MetricSums
from engine.roles.batch import Batch, gather_response, mini_batch_rows
from engine.roles.forward import iter_micro_batches, pad_response, share_rows
from engine.roles.trainable import TrainableRole
from engine.runtime import sharding
from engine.runtime.artifacts import Artifacts
from engine.runtime.precision import Precision
from engine.schedule import build_optimizer, build_scheduler


class Critic(TrainableRole):
    """The value model and its optimizer.

    Args:
        config: the job's `PPOConfig` (`critic.*`; mini-batch size and epochs default to the actor's).
        model_path: the directory to start from (the SFT policy).
        total_steps: PPO iterations of the job (length of the LR schedule).
    """

    def __init__(self, config: PPOConfig, model_path: str, *, total_steps: int, rank: int = 0,
                 world_size: int = 1, num_threads: int | None = None, seed: int = 0,
                 use_gpu: bool = False, artifacts: Artifacts | None = None) -> None:
        super().__init__(rank=rank, world_size=world_size, num_threads=num_threads, seed=seed, use_gpu=use_gpu,
                         artifacts=artifacts)
        self.cfg = config
        model_cfg = dataclasses.replace(config.model, lora_adapter_path=None)
        model_path = self.artifacts.stage(model_path)
        self.tokenizer = load_tokenizer(model_path)  # only for the checkpoints' Hugging Face export
        self.model = load_value_model(model_path, model_cfg, trainable=True).to(self.device)
        self.optimizer = build_optimizer(self.model, config.critic.optim)
        self.scheduler = build_scheduler(self.optimizer, config.critic.optim, total_steps)
        self.precision = Precision(config.model.dtype, self.device)
        self._init_grads()
        self._strategy = (config.critic.strategy, config.critic.fsdp_config)
        self._ulysses = (config.critic.ulysses_sequence_parallel_size, "critic.ulysses_sequence_parallel_size")
        self._rebuild = lambda: self._build_optimizer(total_steps)

    def _build_optimizer(self, total_steps: int) -> None:
        self.optimizer = build_optimizer(self.model, self.cfg.critic.optim)
        self.scheduler = build_scheduler(self.optimizer, self.cfg.critic.optim, total_steps)

    def _values(self, mb: Batch) -> torch.Tensor:
        with self.precision.autocast():
            values = token_values(self.model, mb["input_ids"], mb["attention_mask"])
        return gather_response(values, mb["prompt_lens"], mb["responses"].shape[1])

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> dict[str, Any]:
        """`values`: `(batch, R)` value of the state before each response token."""
        start = time.perf_counter()
        c = self.cfg.critic
        width = batch["responses"].shape[1]
        mine = slice(None)
        if self.sp.size > 1:  # the sequence-parallel group scores its rows together
            batch, _, mine = share_rows(batch, self.sp)
        out = torch.zeros(batch["responses"].shape, dtype=torch.float32)
        self.model.eval()
        with sharding.gathered(self.sharded):  # fsdp2: any number of forwards, no collectives
            for index, mb in iter_micro_batches(batch, range(len(batch["input_ids"])), dynamic=c.use_dynamic_bsz,
                                                max_tokens=c.ppo_max_token_len_per_gpu,
                                                size=c.ppo_micro_batch_size_per_gpu, device=self.device,
                                                packed=packing.enabled(self.model)):
                out[index] = pad_response(self._values(mb), width).cpu()
        return {"values": out[mine], "time_s": time.perf_counter() - start}

    def update_critic(self, batch: Batch, mini_sizes: Sequence[int]) -> dict[str, Any]:
        """Value-loss epochs over this worker's rows (batch holds `values` and `returns`).

        Returns:
            `metrics` (name -> (weighted sum, weight)), `nonfinite`, `time_s`.
        """
        start = time.perf_counter()
        c = self.cfg.critic
        epochs = c.ppo_epochs or self.cfg.actor.ppo_epochs
        width = batch["responses"].shape[1]
        totals = mini_batch_totals(self, batch, mini_batch_rows(mini_sizes), c.loss_agg_mode)
        if self.sp.size > 1:  # the sequence-parallel group trains on its rows together
            batch, mini_sizes, _ = share_rows(batch, self.sp, mini_sizes)
        bounds = mini_batch_rows(mini_sizes)
        sums = MetricSums()
        nonfinite = False
        self.model.train()
        for _ in range(epochs):
            for rows, total in zip(bounds, totals):
                kw = {"dynamic": c.use_dynamic_bsz, "max_tokens": c.ppo_max_token_len_per_gpu,
                      "size": c.ppo_micro_batch_size_per_gpu, "device": self.device,
                      "packed": packing.enabled(self.model)}
                micro = list(iter_micro_batches(batch, rows, **kw))
                for (_, mb), real in self._lockstep(micro, batch, rows, **kw):
                    if not real:  # fsdp2: a filler keeps the collectives in step and adds nothing
                        (self._values(mb).sum() * 0.0).backward()
                        continue
                    mask = mb["response_mask"]
                    vpreds = self._values(mb)
                    loss, m = value_loss(vpreds, mb["values"], mb["returns"], mask, c.cliprange_value,
                                         c.loss_agg_mode)
                    weight = loss_weight(mask, c.loss_agg_mode, width) / max(total, 1e-8) * self.sp.loss_scale
                    self.precision.backward(loss * weight)
                    tokens = float(mask.sum())
                    sums.add("critic/vf_loss", float(loss.detach()), tokens)
                    sums.add("critic/vf_clipfrac", m["vf_clipfrac"], tokens)
                    sums.add("critic/vpred_mean", float(masked_mean(vpreds.detach(), mask)), tokens)
                grad_norm, finite = self._optimizer_step(c.optim.grad_clip)
                sums.add("critic/grad_norm", grad_norm)
                if not finite:
                    nonfinite = True
                    break
            if nonfinite:
                break
        sums.add("critic/lr", self.current_lr())
        sums.add("perf/critic_state_bytes_per_worker", self.state_bytes())
        if not nonfinite:
            self.scheduler.step()
        return {"metrics": sums.sums if self.sp.counts else {}, "nonfinite": nonfinite,
                "time_s": time.perf_counter() - start}
