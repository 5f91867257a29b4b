"""ActorRollout: the policy being trained, and the sampler that draws responses from it.

Verbs on a batch (VERL's): `generate`, `compute_log_prob`, `compute_ref_log_prob` (LoRA only: the
actor with its adapter disabled is the reference policy), `update_actor`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from engine import packing
from engine.algos import agg_loss, kl_penalty, masked_mean, policy_loss
from engine.algos.correction import rollout_correction
from engine.config import PPOConfig
from engine.environments.building import EnvironmentContext
from engine.errors import ConfigError, EngineError
from engine.models import (
    count_parameters,
    is_lora,
    load_policy,
    load_tokenizer,
    reference_mode,
    resolve_lora_rank,
    save_model,
)
from engine.roles import episode_batch
from engine.roles.base import MetricSums
from engine.roles.batch import Batch, build_batch, mini_batch_rows
from engine.roles.forward import (
    iter_micro_batches,
    pad_response,
    policy_log_probs,
    role_log_probs,
    share_rows,
)
from engine.roles.trainable import TrainableRole
from engine.rollout.backends import make_rollout
from engine.rollout.sampling import SamplingParams, weights_fingerprint
from engine.runtime import sharding
from engine.runtime.artifacts import Artifacts
from engine.runtime.precision import Precision
from engine.schedule import build_optimizer, build_scheduler


def loss_weight(mask: torch.Tensor, mode: str, response_width: int) -> float:
    """What one micro-batch counts for in its mini-batch's loss, for `agg_loss` mode `mode`.

    The micro-batch loss (a mean over its own tokens or rows) is multiplied by
    `weight / global total of weights in the mini-batch`, so summing over micro-batches and
    data-parallel workers gives exactly the loss of the whole mini-batch.
    """
    if mode == "token-mean":
        return float(mask.sum())
    if mode == "seq-mean-token-mean":
        return float((mask.sum(-1) > 0).sum())
    if mode == "seq-mean-token-sum":
        return float(mask.shape[0])
    # seq-mean-token-sum-norm: a mean over rows, divided by the trimmed width; rescale to the full width.
    return mask.shape[0] * mask.shape[1] / response_width


def mini_batch_totals(role: TrainableRole, batch: Batch, bounds: Sequence[Sequence[int]],
                      mode: str) -> list[float]:
    """Per mini-batch, the sum of `loss_weight` over all its rows on all workers."""
    # seq-mean-token-sum-norm's weights carry a width ratio; what it divides by is the row count.
    mode = "seq-mean-token-sum" if mode == "seq-mean-token-sum-norm" else mode
    width = batch["response_mask"].shape[1]
    local = [loss_weight(batch["response_mask"][list(rows)], mode, width) if rows else 0.0 for rows in bounds]
    return role._global_sum(local)


def policy_rollout(name: str, model: Any, tokenizer: Any, model_path: str, config: PPOConfig, *, seed: int,
                   device: torch.device) -> Any:
    """The rollout backend `name` over a policy loaded for `config` (the actor's, or a rollout worker's
    copy): its LoRA rank as the model resolved it, and room for the longest prompt plus response."""
    lora_rank = resolve_lora_rank(config.model.lora_rank, count_parameters(model)) if config.model.lora_rank else 0
    return make_rollout(name, model, tokenizer=tokenizer, model_path=model_path, dtype=config.model.dtype,
                        lora_rank=lora_rank,
                        max_model_len=config.data.max_prompt_length + config.data.max_response_length,
                        seed=seed, config=config, device=device)


class ActorRollout(TrainableRole):
    """The policy, its optimizer and its rollout backend.

    Args:
        config: the job's `PPOConfig`.
        model_path: the SFT policy directory.
        total_steps: PPO iterations of the job (length of the LR schedule).
        rollout: backend name (`hf` or `vllm`), already checked by the driver.
        environment_context: what every episode environment of the job shares (`rollout.multi_turn`).
        rank, world_size, num_threads, seed, use_gpu: see `Role`.
    """

    def __init__(self, config: PPOConfig, model_path: str, *, total_steps: int, rollout: str = "hf",
                 environment_context: EnvironmentContext | None = None, rank: int = 0, world_size: int = 1,
                 num_threads: int | None = None, seed: int = 0, use_gpu: bool = False,
                 artifacts: Artifacts | None = None) -> None:
        super().__init__(rank=rank, world_size=world_size, num_threads=num_threads, seed=seed, use_gpu=use_gpu,
                         artifacts=artifacts)
        self.cfg = config
        self.environment_context = environment_context or EnvironmentContext(seed=seed)
        model_path = self.artifacts.stage(model_path)
        self.tokenizer = load_tokenizer(model_path)
        self.model = load_policy(model_path, config.model, trainable=True).to(self.device)
        self.optimizer = build_optimizer(self.model, config.actor.optim)
        self.scheduler = build_scheduler(self.optimizer, config.actor.optim, total_steps)
        self.precision = Precision(config.model.dtype, self.device)
        self._init_grads()
        if config.actor.strategy == "fsdp2" and rollout != "hf":
            raise ConfigError("actor.strategy fsdp2 needs rollout.name hf (vllm reads the full weights)",
                              param="actor.strategy")
        self._strategy = (config.actor.strategy, config.actor.fsdp_config)
        self._ulysses = (config.actor.ulysses_sequence_parallel_size, "actor.ulysses_sequence_parallel_size")
        self._rebuild = lambda: self._build_optimizer(total_steps)
        self.clip_low, self.clip_high = config.actor.clip_low, config.actor.clip_high
        self.rollout = policy_rollout(rollout, self.model, self.tokenizer, model_path, config, seed=seed,
                                      device=self.device)
        # Policy version: weight changes seen by the trainer vs syncs the rollout backend received.
        self.weights_version = 0
        self._sync_base = self.rollout.syncs

    def _build_optimizer(self, total_steps: int) -> None:
        self.optimizer = build_optimizer(self.model, self.cfg.actor.optim)
        self.scheduler = build_scheduler(self.optimizer, self.cfg.actor.optim, total_steps)

    # --- sampling ------------------------------------------------------------------------------

    def sampling_params(self, validate: bool = False, greedy: bool = False) -> SamplingParams:
        r = self.cfg.rollout
        if greedy:
            return SamplingParams(max_new_tokens=self.cfg.data.max_response_length, do_sample=False)
        if validate:
            return SamplingParams(max_new_tokens=self.cfg.data.max_response_length,
                                  temperature=r.val_temperature, top_p=r.top_p, top_k=r.top_k,
                                  do_sample=r.val_temperature > 0)
        return SamplingParams(max_new_tokens=self.cfg.data.max_response_length, temperature=r.temperature,
                              top_p=r.top_p, top_k=r.top_k, do_sample=r.do_sample)

    def generate(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int],
                 validate: bool = False, greedy: bool = False,
                 meta: Sequence[dict[str, Any]] | None = None) -> tuple[Batch, float]:
        """Sample one response per prompt (the driver repeats prompts `rollout.n` times); `validate`
        samples with `rollout.val_temperature`, `greedy` decodes by argmax. With `rollout.multi_turn`
        each prompt runs as an episode against its row's environment (`meta[i]["environment"]`), laid
        out by `engine.roles.episode_batch`.

        Returns:
            `(batch, seconds)`: a `Batch` (see `engine.roles.batch`) and the wall time, as two values
            so the batch can be handed to other roles by reference.
        """
        start = time.perf_counter()
        params = self.sampling_params(validate, greedy)
        episodes = None
        with self.precision.autocast(), sharding.gathered(self.sharded):
            if self.cfg.rollout.multi_turn.enable:
                episodes = episode_batch.run(self.rollout.generate, self.tokenizer, prompts, seeds, params,
                                             meta or [{} for _ in prompts], self.cfg, self.environment_context)
                responses = [e.response_ids for e in episodes]
                # An environment's first observation (its `reset` messages) is part of the prompt.
                prompts = [e.prompt_ids or p for e, p in zip(episodes, prompts)]
                episode_batch.check_prompt_width(prompts, self.cfg.data.max_prompt_length)
            else:
                responses = self.rollout.generate(prompts, seeds, params)
        width = self.cfg.data.max_response_length
        batch = build_batch(prompts, responses, prompt_width=self.cfg.data.max_prompt_length,
                            response_width=width, pad_id=self.tokenizer.pad_token_id,
                            loss_masks=None if episodes is None else [e.loss_mask for e in episodes])
        # The policy version the rows were sampled from, as the backend knows it (see `update_actor`).
        stamp = [float(self.rollout.syncs - self._sync_base), float(self.rollout.fingerprint or 0.0)]
        batch["policy_version"] = torch.tensor([stamp] * len(responses), dtype=torch.float64)
        sampled = (getattr(self.rollout, "last_log_probs", None) if episodes is None
                   else [e.sampling_log_probs for e in episodes])
        if sampled is not None and not (validate or greedy):
            lp = torch.zeros(len(responses), width, dtype=torch.float32)
            for i, row in enumerate(sampled):
                lp[i, :len(row)] = torch.as_tensor(row, dtype=torch.float32)
            batch["rollout_log_probs"] = lp
        if episodes is not None:
            batch.update(episode_batch.tensors(episodes, width))
        return batch, time.perf_counter() - start

    def check_policy_version(self, batch: Batch) -> None:
        """Refuse rows sampled from other weights than the ones being trained: every row's version
        (the sampling worker's backend sync count) must be the trainer's, and this worker's
        backend must hold the fingerprint of the trained weights (a sync that ran but carried other
        weights). The fingerprint is compared within the worker, where it is computed the same way."""
        stamp = batch.get("policy_version")
        if stamp is None or not len(stamp):
            return
        version = float(self.weights_version)
        fingerprint = weights_fingerprint(self.model)
        # Pipelined rollout (`rollout.mode`): rows may lag by up to the allowed staleness (the driver
        # checks each row's version against it); never from weights newer than the trainer's.
        bad = stamp[:, 0] != version if self.cfg.rollout.mode == "sync" else stamp[:, 0] > version
        if bool(bad.any()) or self.rollout.fingerprint != fingerprint:
            row = int(bad.nonzero()[0, 0]) if bool(bad.any()) else 0
            raise EngineError(
                f"weight sync check: rollout rows were sampled from policy version {int(stamp[row, 0])} "
                f"(weights fingerprint {self.rollout.fingerprint}) but the trainer holds version "
                f"{int(version)} (fingerprint {fingerprint}): the rollout engine did not receive the "
                "trained weights", code="weight_sync_failed",
                data={"batch_version": int(stamp[row, 0]), "trainer_version": int(version),
                      "rows": int(bad.sum()), "rollout_fingerprint": self.rollout.fingerprint,
                      "trainer_fingerprint": fingerprint})

    def export_weights(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The trained tensors (CPU copies) with their version, for rollout workers
        (`RolloutWorker.load_weights`), and apart from them what the driver checks (`version`,
        `fingerprint`, `time_s`): two values, so the tensors go through the object store to the
        workers only. Not under fsdp2 (the driver refuses that with separate rollout workers)."""
        start = time.perf_counter()
        state = {k: p.detach().to("cpu", copy=True) for k, p in self.model.named_parameters() if p.requires_grad}
        meta = {"version": self.weights_version, "fingerprint": weights_fingerprint(self.model)}
        return {"state": state, **meta}, {**meta, "time_s": time.perf_counter() - start}

    def weight_broadcast(self, verb: str, *args: Any) -> Any:
        """`rollout.weight_sync: collective` (the trainer's side): `engine.runtime.weight_sync.trainer_verb`."""
        from engine.runtime import weight_sync

        return weight_sync.trainer_verb(self, verb, *args)

    # --- log-probs -----------------------------------------------------------------------------

    def _log_probs(self, batch: Batch) -> torch.Tensor:
        with self.precision.autocast(), sharding.gathered(self.sharded):
            return role_log_probs(self.model, batch, self.cfg, self.device)

    def compute_log_prob(self, batch: Batch) -> dict[str, Any]:
        """Log-probs of the sampled responses under the current (rollout) policy: `old_log_prob`."""
        start = time.perf_counter()
        return {"log_probs": self._log_probs(batch), "time_s": time.perf_counter() - start}

    def compute_ref_log_prob(self, batch: Batch) -> dict[str, Any]:
        """Reference log-probs with the adapter disabled (LoRA only; otherwise use `Reference`)."""
        start = time.perf_counter()
        with reference_mode(self.model):
            log_probs = self._log_probs(batch)
        return {"log_probs": log_probs, "time_s": time.perf_counter() - start}

    # --- training ------------------------------------------------------------------------------

    def optimizer_position(self) -> int:
        """Actor updates the LR schedule has taken (one per update): checked when a job resumes."""
        return int(self.scheduler.last_epoch)

    def set_clip_ratio(self, clip_ratio: float) -> None:
        """Mitigation after a rollback: tighten the trust region to at most `clip_ratio`."""
        self.clip_low = min(self.clip_low, clip_ratio)
        self.clip_high = min(self.clip_high, clip_ratio)

    def update_actor(self, batch: Batch, mini_sizes: Sequence[int]) -> dict[str, Any]:
        """PPO epochs over this worker's rows, one optimizer step per mini-batch.

        Args:
            batch: rows with `old_log_probs`, `advantages` (and `ref_log_probs` with `use_kl_loss`).
                Without `old_log_probs` the update is on-policy (one epoch, one mini-batch: checked):
                each micro-batch's own forward, detached, serves as the old log-probs.
            mini_sizes: this worker's rows in each global mini-batch (see `shard_rows`).

        Returns:
            `metrics` (name -> (weighted sum, weight), merged across workers by the driver),
            `log_probs` (for the KL guardrail: every row under the weights the update produced, one
            forward after the last step; the update's own forwards all ran before some step, so
            they would judge the policy one update late), `sampling_log_probs` (on-policy only:
            the update's forwards, all before its single step, i.e. the sampling policy's),
            `nonfinite` (a loss or gradient was NaN/inf on any worker: every worker skipped the
            remaining steps; `log_probs` are then the old ones), `time_s`. Rows whose
            `response_mask` is all zero (filtered out) get zeros.
        """
        start = time.perf_counter()
        self.check_policy_version(batch)
        a = self.cfg.actor
        width = batch["responses"].shape[1]
        own, mine = batch, slice(None)
        totals = mini_batch_totals(self, batch, mini_batch_rows(mini_sizes), a.loss_agg_mode)
        if self.sp.size > 1:  # the sequence-parallel group trains on its rows together
            batch, mini_sizes, mine = share_rows(batch, self.sp, mini_sizes)
        bounds = mini_batch_rows(mini_sizes)
        sums = MetricSums()
        nonfinite = False
        sampling_log_probs = None
        if "old_log_probs" not in batch:
            if a.ppo_epochs != 1 or len(bounds) != 1:
                raise ValueError("update_actor without old_log_probs needs one PPO epoch in one mini-batch")
            sampling_log_probs = torch.zeros(batch["response_mask"].shape, dtype=torch.float32)
        self.model.train()
        for epoch in range(a.ppo_epochs):
            last = epoch == a.ppo_epochs - 1
            for rows, total in zip(bounds, totals):
                kw = {"dynamic": a.use_dynamic_bsz, "max_tokens": a.ppo_max_token_len_per_gpu,
                      "size": a.ppo_micro_batch_size_per_gpu, "device": self.device,
                      "packed": packing.enabled(self.model), "model": self.model}
                micro = list(iter_micro_batches(batch, rows, **kw))
                for (index, mb), real in self._lockstep(micro, batch, rows, **kw):
                    if not real:  # fsdp2: a filler keeps the collectives in step and adds nothing
                        with self.precision.autocast():
                            log_probs, _ = policy_log_probs(self.model, mb, temperature=1.0)
                        (log_probs.sum() * 0.0).backward()
                        continue
                    log_probs = self._backward(mb, total, width, sums, last_epoch=last)
                    if sampling_log_probs is not None:
                        sampling_log_probs[index] = pad_response(log_probs, width).cpu()
                grad_norm, finite = self._optimizer_step(a.optim.grad_clip)
                sums.add("actor/grad_norm", grad_norm)
                if not finite:
                    nonfinite = True
                    break
            if nonfinite:
                break
        sums.add("actor/lr", self.current_lr())
        sums.add("perf/actor_state_bytes_per_worker", self.state_bytes())
        if not nonfinite:
            self.scheduler.step()
        self._after_weights_changed()
        if nonfinite:  # the step is rolled back: nothing to judge
            new_log_probs = batch.get("old_log_probs", sampling_log_probs)[mine].clone()
        else:
            new_log_probs = self._log_probs(own)
        out = {"metrics": sums.sums if self.sp.counts else {}, "log_probs": new_log_probs, "nonfinite": nonfinite,
               "time_s": time.perf_counter() - start}
        if sampling_log_probs is not None:
            out["sampling_log_probs"] = sampling_log_probs[mine]
        return out

    def _backward(self, mb: Batch, total: float, width: int, sums: MetricSums, *,
                  last_epoch: bool) -> torch.Tensor:
        """Forward and backward of one micro-batch; returns its detached log-probs `(b, r)`.

        The entropy (a full-vocabulary softmax per token) is only in the graph when
        `entropy_coeff` is set; otherwise `actor/entropy` is computed detached, in the last epoch
        only. Either way the metric is the last epoch's mean.
        """
        a = self.cfg.actor
        mask = mb["response_mask"]
        mode = "grad" if a.entropy_coeff else ("metric" if last_epoch else "off")
        with self.precision.autocast():
            log_probs, entropy = policy_log_probs(self.model, mb, temperature=self.cfg.rollout.temperature,
                                                  entropy=mode)
        old = mb["old_log_probs"] if "old_log_probs" in mb else log_probs.detach()
        advantages = mb["advantages"]
        corr = self.cfg.algorithm.rollout_correction
        if (corr.rollout_is or corr.rollout_rs) and "rollout_log_probs" in mb:
            # Weights >= 0 scale each token's clipped surrogate, so they can ride on the advantages.
            weights, kept = rollout_correction(
                old, mb["rollout_log_probs"], mask, rollout_is=corr.rollout_is, is_threshold=corr.rollout_is_threshold,
                rollout_rs=corr.rollout_rs, rs_threshold=corr.rollout_rs_threshold)
            advantages = advantages * weights.to(advantages.dtype)
            tokens_in = float(mask.sum())
            sums.add("rollout_corr/is_weight_mean", float(masked_mean(weights, mask)), tokens_in)
            sums.add("rollout_corr/rejected_frac", float(1.0 - kept.sum() / max(tokens_in, 1.0)), tokens_in)
        pg_loss, pg = policy_loss(old, log_probs, advantages, mask,
                                  clip_ratio_low=self.clip_low, clip_ratio_high=self.clip_high,
                                  clip_ratio_c=a.clip_ratio_c, loss_agg_mode=a.loss_agg_mode)
        loss = pg_loss
        if a.entropy_coeff:
            loss = loss - a.entropy_coeff * agg_loss(entropy, mask, a.loss_agg_mode)
        tokens = float(mask.sum())
        if a.use_kl_loss:
            kl = agg_loss(kl_penalty(log_probs, mb["ref_log_probs"], a.kl_loss_type), mask, a.loss_agg_mode)
            loss = loss + a.kl_loss_coef * kl
            sums.add("actor/kl_loss", float(kl.detach()), tokens)
            sums.add("actor/kl_coef", a.kl_loss_coef)
        # A sequence-parallel group's ranks all hold the micro-batch's loss: each takes 1/sp of it.
        weight = loss_weight(mask, a.loss_agg_mode, width) / max(total, 1e-8) * self.sp.loss_scale
        self.precision.backward(loss * weight)
        sums.add("actor/pg_loss", float(pg_loss.detach()), tokens)
        if last_epoch and entropy is not None:
            sums.add("actor/entropy", float(masked_mean(entropy.detach(), mask)), tokens)
        for name in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"):
            sums.add(f"actor/{name}", pg[name], tokens)
        return log_probs.detach()

    def _after_weights_changed(self) -> None:
        self.weights_version += 1
        self.rollout.sync_weights(self.model)

    # --- output --------------------------------------------------------------------------------

    def save_model(self, out_dir: str) -> str:
        """Write the trained policy for use outside Keel; returns `hf` or `lora`. Under fsdp2 every
        worker is called: the full weights are gathered to rank 0."""
        model = self._full_model()
        if model is None:
            return "hf"
        with self.artifacts.writing(out_dir) as local:  # a URL: written on this node, then uploaded
            return save_model(model, self.tokenizer, local, dtype=self.precision.dtype)

    def is_lora(self) -> bool:
        return is_lora(self.model)

