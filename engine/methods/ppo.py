"""PPO with Actor / Critic / Reference / Reward roles: the single-controller driver loop.

One iteration reads like the algorithm (VERL's `ray_trainer.fit`, trimmed)::

    snapshot (last good state) -> generate (rollout.n samples per prompt) -> old log-probs
    -> ref log-probs -> values -> rewards                     [one phase: submitted together]
    -> KL in reward -> advantages (GAE or GRPO)               [driver]
    -> critic update + actor update (after critic_warmup)     [one phase]
    -> guardrails -> validation -> metrics -> checkpoint

Each phase submits work to every role and gathers once (`ray.get` with the step's remaining time:
the step watchdog); the generated batch travels from the actor to the other roles by object
reference. `reporter.should_stop()` is checked between phases; `reporter.should_pause()` between
steps (the last finished step is checkpointed, then `Paused` is raised).

Guardrails (`config.guardrails`): after every update, `guardrails/step_kl` (the k3 estimate of
KL(pi_new || pi_old) on the step's samples, pi_new from one forward of the updated policy after its
last optimizer step: the update's own forwards all precede a step, so they would judge the policy
one update late, and a rollback would restore weights that already hold it) above `rollback_kl`, or
a NaN/inf reward, loss or gradient, restores the state at the start of the step (actor, critic, both
optimizers and LR schedules, KL controller, data position) from an in-memory snapshot, halves the actor LR
(`rollback_lr_factor`), tightens `clip_ratio` to `rollback_clip_ratio`, reports a `rollback`
warning and retries the step; after `max_rollbacks` rollbacks the next one raises `Diverged`.
A rolled-back step never reported metrics, so step numbers are never repeated. `guardrails/kl`
(KL(pi_new || pi_ref), the drift a learning run accumulates: a rollback to the start of the step,
already near it, could only trip again) above `warn_kl` reports `kl_high`. At the end,
`val/overfit_gap` = training reward (mean over the last epoch's steps) - `val/reward/mean`, with an
`overfit` warning above max(0.05, half the training scores' standard deviation). Collapse
(`min_entropy` on `actor/entropy`, `min_distinct_ratio` on `val/distinct_responses`) warns with decoded samples or rolls back (`collapse_action`);
`rollout/logprob_diff/*` above `max_logprob_diff` warns (`logprob_gap`). With validation data the
untrained policy is validated first (`trainer.val_before_train`, step 0).

Weight sync: every rollout batch carries its policy version (the backend's sync count and weights
fingerprint); the actor refuses a batch from other weights (`weight_sync_failed`).

Resume: checkpoints (`step_<N>`, atomic) hold the actor and critic (weights, optimizers, LR
schedules) and the loop state (step, data position, KL controller, mitigations, reward history);
sampling uses counter-based seeds per (job seed, batch, row), so a resumed job continues exactly.
A resume checks that the recorded step, data position and actor schedule agree (else
`invalid_checkpoint`) and logs where it continues.

What the loop calls lives beside it: `ppo_dispatch` (submissions to the roles, bounded gathers),
`ppo_rollout` (the rollout phase), `ppo_experience` (shaping, dynamic sampling, advantages, metrics),
`ppo_update` (the update phase), `ppo_validation` (validation, overfit, collapse) and
`ppo_checkpoint` (checkpoints and the resume invariants); with `rollout.mode` other than `sync` or
`rollout.colocate: false`, `ppo_async` generates the batches ahead of their steps (the rollout phase
then scores a batch already generated).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from engine.algos import AdaptiveKLController, FixedKLController
from engine.config import JobRequest, JobResult, PPOConfig, check_parallel
from engine.data import PromptExample, load_rows, tokenize_prompts
from engine.errors import Cancelled, ConfigError, DataError, Diverged, Paused
from engine.guardrails import ReplayBuffer, Verdict, judge_step, sequence_mean_kl
from engine.methods import ppo_async, ppo_checkpoint, ppo_rollout, ppo_samples, ppo_update, ppo_validation
from engine.methods import ppo_experience as experience
from engine.methods.ppo_dispatch import RoleDispatch
from engine.methods.ppo_episodes import context as environment_context
from engine.methods.ppo_validation import VAL_STREAM
from engine.models import load_tokenizer
from engine.rewards.rules import rule_reward_kwargs
from engine.rollout.sampling import row_seed
from engine.rollout.vllm import vllm_available
from engine.runtime.artifacts import for_request, join
from engine.runtime.checkpoint import COMPLETE, CheckpointError
from engine.runtime.cluster import connect
from engine.runtime.distributed import start_group
from engine.runtime.reporting import Reporter
from engine.runtime.watchdog import MaxDurationExceeded

STARTUP_TIMEOUT_S = 900.0
"""Reserving resources and loading every role's model (not a training step: no step watchdog)."""


def run_ppo(request: JobRequest, reporter: Reporter) -> JobResult:
    """Train a policy with PPO; see the module docstring. Returns the policy in `request.output_dir`."""
    return PPOTrainer(request, reporter).fit()


class PPOTrainer:
    """The driver: owns the roles, the data position, the KL controller and the guardrails.

    `fault_hook(trainer, step)`, if set, runs just before each step's update phase (tests inject
    faults through it, e.g. `trainer.roles["actor"]` workers' `apply`).
    """

    fault_hook: Callable[[PPOTrainer, int], None] | None = None

    def __init__(self, request: JobRequest, reporter: Reporter) -> None:
        if not isinstance(request.config, PPOConfig):
            raise ConfigError("run_ppo needs a PPOConfig", param="config")
        self.request, self.reporter, self.cfg = request, reporter, request.config
        self.artifacts = for_request(request)
        cfg = self.cfg
        algo = cfg.algorithm
        self.use_critic = algo.adv_estimator == "gae"
        self.lora = bool(cfg.model.lora_rank) or bool(cfg.model.lora_adapter_path)
        self.num_workers = request.resources.num_workers
        check_parallel(cfg, request.resources)
        self.num_mini_batches = max(1, cfg.data.train_batch_size // cfg.actor.ppo_mini_batch_size)
        critic_mini = cfg.critic.ppo_mini_batch_size or cfg.actor.ppo_mini_batch_size
        self.num_critic_mini_batches = max(1, cfg.data.train_batch_size // critic_mini)
        if min(cfg.actor.ppo_mini_batch_size, critic_mini) * cfg.rollout.n < self.num_workers:
            raise ConfigError("each mini-batch needs at least one sample per worker: "
                              "ppo_mini_batch_size * rollout.n >= resources.num_workers",
                              param="actor.ppo_mini_batch_size")
        ctrl = algo.kl_ctrl
        self.kl_ctrl: AdaptiveKLController | FixedKLController = (
            AdaptiveKLController(ctrl.kl_coef, ctrl.target_kl, ctrl.horizon) if ctrl.type == "adaptive"
            else FixedKLController(ctrl.kl_coef))
        self.replay = ReplayBuffer(cfg.guardrails.reward_filter.replay_buffer_size
                                   if cfg.guardrails.reward_filter.enable else 0)
        # On-policy: one PPO epoch in one mini-batch, no KL in the reward (the only use of the old
        # log-probs before the update), the actor updating from step 1, no replayed rows. The update
        # then starts from the weights that sampled, so its own forward gives the old log-probs; the
        # actor uses those (detached) and the `old_log_prob` pass is skipped (VERL and TRL do the same).
        self.on_policy = (cfg.actor.ppo_epochs == 1 and self.num_mini_batches == 1
                          and not algo.use_kl_in_reward and cfg.trainer.critic_warmup == 0
                          and not self.replay.capacity)
        self.step = 0
        self.consumed = 0
        self.rollbacks = 0
        self.rollback_history: list[dict[str, Any]] = []
        self.lr_scale = 1.0
        self.clip_ratio: float | None = None
        self.train_scores: list[float] = []
        self.train_spreads: list[float] = []
        self.val_responses: list[list[int]] | None = None
        self.final_metrics: dict[str, float] = {}
        self.roles: Any = None
        self._perms: dict[int, list[int]] = {}
        ppo_async.check(cfg, request.resources.rollout_workers, num_workers=self.num_workers)
        self.pipeline: ppo_async.RolloutPipeline | None = None
        self._recorded: dict[str, Any] | None = None  # a resumed checkpoint's batches in flight

    # --- setup ---------------------------------------------------------------------------------

    def _load_data(self) -> None:
        cfg, req = self.cfg, self.request
        tokenizer = load_tokenizer(self.artifacts.stage(req.model_path))
        self.tokenizer, self.pad_id = tokenizer, tokenizer.pad_token_id
        rows = load_rows(self.artifacts.stage(req.training_file), "prompts")
        self.train = tokenize_prompts(rows, tokenizer, cfg.data.max_prompt_length, cfg.data.truncation,
                                      filter_overlong_prompts=cfg.data.filter_overlong_prompts,
                                      environment=req.environment)
        self.val: list[PromptExample] = []
        if req.validation_file:
            val_rows = load_rows(self.artifacts.stage(req.validation_file), "prompts")
            self.val = tokenize_prompts(val_rows, tokenizer, cfg.data.max_prompt_length, cfg.data.truncation,
                                        filter_overlong_prompts=cfg.data.filter_overlong_prompts,
                                        environment=req.environment)
        self.steps_per_epoch = len(self.train) // cfg.data.train_batch_size
        if self.steps_per_epoch == 0:
            raise DataError(f"the training file has {len(self.train)} prompts, fewer than "
                            f"data.train_batch_size={cfg.data.train_batch_size}", param="data.train_batch_size")
        self.total_steps = cfg.trainer.total_training_steps or cfg.trainer.total_epochs * self.steps_per_epoch

    def _reward_kwargs(self) -> dict[str, Any]:
        spec = dict(self.request.reward or {})
        if spec.get("model_path"):
            return {"model_path": spec["model_path"]}
        return rule_reward_kwargs(spec, [p.data_source for p in self.train + self.val])

    def _rollout_backend(self) -> str:
        name = self.cfg.rollout.name
        if name == "vllm" and not (vllm_available() and self.request.resources.gpus_per_worker > 0):
            self.reporter.warning("rollout_fallback", "rollout.name='vllm' needs the gpu extra and a GPU; "
                                  "sampling with the hf backend instead", {"requested": "vllm"})
            return "hf"
        return name

    def _start_roles(self) -> None:
        from engine.roles.actor import ActorRollout
        from engine.roles.critic import Critic
        from engine.roles.reference import Reference
        from engine.roles.remote import RoleSpec
        from engine.roles.reward import Reward

        cfg, req, w = self.cfg, self.request, self.num_workers
        common = {"seed": req.seed, "artifacts": self.artifacts}  # each worker stages what it reads
        reward = self._reward_kwargs()
        specs = [RoleSpec("actor", ActorRollout, (cfg, req.model_path),
                          {"total_steps": self.total_steps, "rollout": self._rollout_backend(), **common,
                           "environment_context": environment_context(req)},
                          num_workers=w, data_parallel=True)]
        if self.use_critic:
            specs.append(RoleSpec("critic", Critic, (cfg, req.model_path),
                                  {"total_steps": self.total_steps, **common}, num_workers=w, data_parallel=True))
        if not self.lora:  # a process group only for sequence parallelism (the reference never steps)
            specs.append(RoleSpec("ref", Reference, (cfg, req.model_path), common, num_workers=w,
                                  data_parallel=cfg.ref.ulysses_sequence_parallel_size > 1))
        if not cfg.rollout.colocate:  # generation on workers of its own (`engine.methods.ppo_async`)
            from engine.roles.rollout_worker import RolloutWorker
            specs.append(RoleSpec("rollout", RolloutWorker, (cfg, req.model_path),
                                  {"rollout": self._rollout_backend(), **common},
                                  num_workers=req.resources.rollout_workers, separate=True))
        if reward is not None:  # None: recorded trajectories bring their rewards (ppo_trajectories)
            is_model = "model_path" in reward or bool((reward.get("grading") or {}).get("models"))  # score_model
            specs.append(RoleSpec("reward", Reward, (cfg,), {"tokenizer_path": req.model_path, **reward, **common},
                                  num_workers=w if is_model else 1, uses_gpu=is_model))
        specs += self.extra_roles(common)
        if req.resources.executor == "local":
            from engine.roles.local import LocalRoleCluster as Cluster
        else:
            from engine.roles.remote import RoleCluster as Cluster
        self.roles = start_group(lambda: Cluster(specs, req.resources, startup_timeout_s=STARTUP_TIMEOUT_S))
        self.dispatch = RoleDispatch(self.roles, cfg, num_workers=w, num_mini_batches=self.num_mini_batches,
                                     lora=self.lora, use_critic=self.use_critic, on_policy=self.on_policy)
        if cfg.rollout.mode != "sync" or not cfg.rollout.colocate:
            self.pipeline = ppo_async.RolloutPipeline(self.dispatch, cfg, prompts_of=lambda i: self._prompts(i)[1],
                                                      seed=req.seed, pad_id=self.pad_id,
                                                      total_batches=self.total_steps)
        self.reporter.placement(self.roles.placement())

    def extra_roles(self, common: dict[str, Any]) -> list[Any]:
        """Roles a method built on this loop adds (`distill_policy`: the teacher), as `RoleSpec`s."""
        return []

    # --- loop state ----------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {"step": self.step, "consumed": self.consumed, "kl_ctrl": self.kl_ctrl.state_dict(),
                "rollbacks": self.rollbacks, "rollback_history": list(self.rollback_history),
                "lr_scale": self.lr_scale, "clip_ratio": self.clip_ratio,
                "train_scores": list(self.train_scores), "train_spreads": list(self.train_spreads),
                "replay": self.replay.state_dict(), "seed": self.request.seed,
                "actor_updates": max(0, self.step - self.cfg.trainer.critic_warmup)}

    def _restore_progress(self, state: dict[str, Any]) -> None:
        """The part of the loop state a rollback rewinds (mitigations and rollback counts persist)."""
        self.step, self.consumed = int(state["step"]), int(state["consumed"])
        self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        self.train_scores = list(state["train_scores"])
        self.train_spreads = list(state.get("train_spreads", []))
        self.replay.load_state_dict(state["replay"])

    def _resume(self) -> None:
        path = self.request.resume_from
        if not path:
            return
        refs = self.roles["actor"].submit_all("load_checkpoint", join(path, "actor"))
        if self.use_critic:
            refs += self.roles["critic"].submit_all("load_checkpoint", join(path, "critic"))
        state = self.dispatch.gather({"load": refs}, time.perf_counter() + self.cfg.guardrails.step_timeout_s,
                                     "resume", self.step + 1)["load"][0]["trainer"]
        self._restore_progress(state)
        self._recorded = state.get("rollout_pipeline")
        self.rollbacks = int(state["rollbacks"])
        self.rollback_history = list(state.get("rollback_history", []))
        self.lr_scale, self.clip_ratio = float(state["lr_scale"]), state["clip_ratio"]
        if self.clip_ratio is not None:
            self.dispatch.gather({"clip": self.roles["actor"].submit_all("set_clip_ratio", self.clip_ratio)},
                                 time.perf_counter() + 60, "resume", self.step + 1)
        position = ppo_checkpoint.check_resumed(self.dispatch, self.cfg, path, state, step=self.step,
                                                consumed=self.consumed)
        self.reporter.log(f"resumed from {path}: continuing after step {self.step} at data position "
                          f"{self.consumed} (batches consumed), {position} actor updates (checked)")

    # --- helpers -------------------------------------------------------------------------------

    def _check_stop(self) -> None:
        if self.reporter.should_stop():
            raise Cancelled(f"cancelled after step {self.step}", data={"step": self.step})

    def _prompts(self, index: int) -> tuple[int, list[PromptExample]]:
        """(0-based epoch, prompts) of training batch `index` (a fresh shuffle per epoch)."""
        epoch, pos = divmod(index, self.steps_per_epoch)
        if epoch not in self._perms:
            n = len(self.train)
            perm = (torch.randperm(n, generator=torch.Generator().manual_seed(self.request.seed + epoch)).tolist()
                    if self.cfg.data.shuffle else list(range(n)))
            self._perms = {epoch: perm}
        bs = self.cfg.data.train_batch_size
        return epoch, [self.train[i] for i in self._perms[epoch][pos * bs:(pos + 1) * bs]]

    # --- the loop ------------------------------------------------------------------------------

    def fit(self) -> JobResult:
        resume = self.request.resume_from
        store = self.artifacts
        if resume and not (store.exists(join(resume, COMPLETE)) and store.exists(join(resume, "actor", COMPLETE))):
            raise CheckpointError(f"{resume} is not a complete PPO checkpoint", param="resume_from")
        if self.request.resources.executor == "ray":
            connect(self.request.ray_address)
        self._load_data()
        self.reporter.log(f"PPO: {self.total_steps} steps of {self.cfg.data.train_batch_size} prompts x "
                          f"{self.cfg.rollout.n} samples, {self.num_workers} worker(s), "
                          f"{'GAE' if self.use_critic else 'GRPO'}{', LoRA' if self.lora else ''}")
        self._start_roles()
        try:
            self._resume()
            resumed_at = self.step
            if self.pipeline is not None:
                self.pipeline.start(self.step, self.consumed, self._recorded)
            if self.step == 0 and self.val and self.cfg.trainer.val_before_train:
                self._baseline_validation()
            while self.step < self.total_steps:
                self._check_stop()
                if self.reporter.should_pause():
                    self._save_boundary(resumed_at)
                    raise Paused(f"paused after step {self.step}", data={"step": self.step})
                try:
                    self.reporter.heartbeat(self.step + 1)  # starts the step watchdog's clock
                except MaxDurationExceeded:  # out of time, at a step boundary: keep what was trained
                    self._save_boundary(resumed_at)
                    raise
                self._train_step()
            if not self.final_metrics:  # resumed after the last step: report the final validation only
                self.final_metrics = self._validate(time.perf_counter() + self.cfg.guardrails.step_timeout_s)
            save = self.dispatch.submit_rank0("actor", "save_model", self.request.output_dir)
            fmt = self.dispatch.gather({"save": save}, time.perf_counter() + self.cfg.guardrails.step_timeout_s,
                                       "save_model", self.step + 1)["save"][0]
            return JobResult(output_dir=self.request.output_dir, model_format=fmt, model_kind="policy",
                             metrics=dict(self.final_metrics))
        finally:
            self.roles.shutdown()

    def _baseline_validation(self) -> None:
        """`trainer.val_before_train`: the untrained policy's validation, logged at step 0."""
        metrics = self._validate(time.perf_counter() + self.cfg.guardrails.step_timeout_s)
        ppo_validation.collapse(self.reporter, self.cfg, self.tokenizer, self.val, self.val_responses, 0, None,
                                metrics)  # at step 0 a collapse can only be reported
        self.reporter.metrics(0, metrics, total_steps=self.total_steps, epoch=0)

    def _save_boundary(self, resumed_at: int) -> None:
        """Checkpoint the last finished step on the way out (pause, time limit), unless it has one."""
        freq = self.cfg.trainer.save_freq
        if self.step > resumed_at and not (freq > 0 and self.step % freq == 0):
            self._save_checkpoint(self.step, self.final_metrics,
                                  time.perf_counter() + self.cfg.guardrails.step_timeout_s)

    def _train_step(self) -> None:
        """One PPO iteration; on a guardrail trip it rolls back instead and the loop retries the step."""
        cfg = self.cfg
        step_start, wall_start = time.perf_counter(), time.time()
        deadline = step_start + cfg.guardrails.step_timeout_s
        start_state = self._state()
        step = self.step + 1
        epoch, prompts = self._prompts(self.consumed)

        if self.pipeline is not None:  # generated ahead: scored now
            rollout = self.pipeline.collect(self.consumed, deadline, step=step)
        else:
            rollout = self._rollout_phase(prompts, deadline, batch_index=self.consumed)
        gen_batches = 1
        if cfg.algorithm.filter_groups.enable:
            rollout, gen_batches = self._fill_informative_groups(rollout, deadline)
        self._check_stop()
        scores = rollout["scores"]
        if not torch.isfinite(scores).all():
            bad = int((~torch.isfinite(scores)).sum())
            self._rollback(step, Verdict("rollback", f"non-finite reward in {bad} samples",
                                         {"nonfinite": ["reward"], "rows": bad}), start_state)
            return
        adv = experience.step_advantages(
            cfg, rollout, self.kl_ctrl, self.replay, use_critic=self.use_critic,
            filter_seed=row_seed(self.request.seed, self.consumed, VAL_STREAM - 1))

        self._check_stop()
        if self.fault_hook is not None:
            self.fault_hook(self, step)
        updates, new_log_probs, sampling_log_probs = ppo_update.update(
            self.dispatch, cfg, step, rollout, adv, deadline, num_critic_mini_batches=self.num_critic_mini_batches)

        # The rows the update saw: PF-PPO's dropped rows were never scored (their log-probs are 0).
        mask = adv["loss_mask"]
        if adv["current_kl"] is None:  # on-policy: the update's forwards measured the sampling policy
            adv["current_kl"] = sequence_mean_kl(sampling_log_probs, rollout["ref"], mask, cfg.algorithm.kl_penalty)
        # The policy the update produced (a rollback returns to the weights before it): its drift
        # from the reference, and how far the update itself moved it (what a rollback undoes).
        guard_kl = sequence_mean_kl(new_log_probs, rollout["ref"], mask, "low_var_kl")
        before = rollout["old"] if rollout["old"] is not None else sampling_log_probs
        step_kl = sequence_mean_kl(new_log_probs, before, mask, "low_var_kl") if before is not None else 0.0
        nonfinite = [role for role in ("actor", "critic") if any(u["nonfinite"] for u in updates[role])]
        verdict = judge_step(guard_kl, nonfinite, cfg.guardrails, step_kl=step_kl)
        if verdict.action == "rollback":
            self._rollback(step, verdict, start_state)
            return
        if verdict.action == "warn":
            self.reporter.warning("kl_high", f"step {step}: {verdict.reason}", {"step": step, **verdict.evidence})

        metrics = experience.step_metrics(cfg, rollout, adv, updates, guard_kl=guard_kl, rollbacks=self.rollbacks)
        metrics["guardrails/step_kl"] = step_kl
        metrics.update(ppo_update.logprob_gap_metrics(self.reporter, cfg, step, rollout, sampling_log_probs, mask))
        if cfg.algorithm.filter_groups.enable:
            metrics["train/num_gen_batches"] = float(gen_batches)
        self.step, self.consumed = step, self.consumed + gen_batches
        self.train_scores.append(metrics["critic/score/mean"])
        new_scores = rollout["scores"][:rollout["new_rows"]].float()
        self.train_spreads.append(float(new_scores.std()) if len(new_scores) > 1 else 0.0)
        last = self.step >= self.total_steps
        test_freq = cfg.trainer.test_freq
        if self.val and (last or (test_freq > 0 and step % test_freq == 0)):
            metrics.update(self._validate(deadline))
        collapse = ppo_validation.collapse(self.reporter, cfg, self.tokenizer, self.val, self.val_responses, step,
                                           metrics.get("actor/entropy"), metrics)
        if collapse.action == "rollback":
            self._rollback(step, collapse, start_state)
            return
        if last:
            metrics.update(ppo_validation.overfit(self.reporter, metrics, self.train_scores, self.train_spreads,
                                                  self.steps_per_epoch))
        if self.pipeline is not None:  # the next batches' generation starts behind the new weights
            metrics.update(self.pipeline.advance(self.consumed - 1, self.step, self.consumed, wall_start,
                                                 time.perf_counter() - step_start))
        step_time = time.perf_counter() - step_start
        metrics["timing_s/step"] = step_time
        metrics["perf/throughput"] = metrics["perf/total_num_tokens"] / step_time / self.num_workers
        metrics["training/epoch"] = float(epoch + 1)
        self.reporter.metrics(step, metrics, total_steps=self.total_steps, epoch=epoch + 1)
        ppo_samples.report(self.reporter, self.tokenizer, step, rollout)
        self.final_metrics = metrics

        save_freq = cfg.trainer.save_freq
        if last or (save_freq > 0 and step % save_freq == 0):
            self._save_checkpoint(step, metrics, deadline)

    def _rollout_phase(self, prompts: list[PromptExample], deadline: float, *, batch_index: int,
                       snapshot: bool = True) -> dict[str, Any]:
        """One generation batch of the next step with the replay buffer's samples
        (`ppo_rollout.collect`; `snapshot` False: a further batch of the same step)."""
        return ppo_rollout.collect(self.dispatch, self.cfg, prompts, deadline, step=self.step + 1,
                                   seed=self.request.seed, batch_index=batch_index, replayed=self.replay.take(),
                                   pad_id=self.pad_id, snapshot=snapshot)

    def _fill_informative_groups(self, rollout: dict[str, Any], deadline: float) -> tuple[dict[str, Any], int]:
        """DAPO dynamic sampling: generate further prompt batches until `data.train_batch_size` groups
        have scores that differ (or `max_num_gen_batches` batches were generated: then the batch is
        filled with tied groups, and a `filter_groups_short` warning says so). Returns the step's
        rollout and how many prompt batches it used."""
        cfg = self.cfg
        wanted, limit = cfg.data.train_batch_size, cfg.algorithm.filter_groups.max_num_gen_batches
        parts = [rollout]
        while True:
            pool = experience.merge(parts)
            rows, informative = experience.informative_rows(pool, wanted)
            if informative >= wanted or (limit and len(parts) >= limit):
                break
            self._check_stop()
            index = self.consumed + len(parts)
            parts.append(self._rollout_phase(self._prompts(index)[1], deadline, batch_index=index, snapshot=False))
        if informative < wanted:
            self.reporter.warning("filter_groups_short", f"step {self.step + 1}: {informative} of {wanted} prompt "
                                  f"groups have differing scores after {len(parts)} generation batches",
                                  {"step": self.step + 1, "informative": informative, "wanted": wanted})
        return experience.take_rows(pool, rows), len(parts)

    def _validate(self, deadline: float) -> dict[str, float]:
        """Validation metrics (`ppo_validation.validate`); the responses are kept in `val_responses`
        (collapse guardrail)."""
        if not self.val:
            return {}
        metrics, self.val_responses = ppo_validation.validate(self.dispatch, self.cfg, self.val, deadline,
                                                              seed=self.request.seed, step=self.step + 1)
        return metrics

    def _save_checkpoint(self, step: int, metrics: dict[str, float], deadline: float) -> None:
        state = self._state()
        if self.pipeline is not None:  # the batches generated ahead (a resume trains on them as they are)
            state["rollout_pipeline"] = self.pipeline.record(deadline, self.step + 1)
        ppo_checkpoint.save(self.dispatch, self.artifacts, self.reporter, self.request.checkpoint_dir, step,
                            state, metrics, deadline, gather_step=self.step + 1)

    def _rollback(self, step: int, verdict: Verdict, start_state: dict[str, Any]) -> None:
        g = self.cfg.guardrails
        evidence = {"step": step, "reason": verdict.reason, **verdict.evidence}
        self.rollback_history.append(evidence)
        if self.rollbacks >= g.max_rollbacks:
            raise Diverged(f"step {step}: {verdict.reason}; {self.rollbacks} rollbacks already spent "
                           f"(max_rollbacks={g.max_rollbacks})",
                           data={**evidence, "rollbacks": self.rollbacks, "history": self.rollback_history})
        self.rollbacks += 1
        self._restore_progress(start_state)
        actor = self.roles["actor"]
        refs = actor.submit_all("restore")
        if self.use_critic:
            refs += self.roles["critic"].submit_all("restore")
        self.lr_scale *= g.rollback_lr_factor
        current = self.clip_ratio if self.clip_ratio is not None else self.cfg.actor.clip_ratio
        self.clip_ratio = min(current, g.rollback_clip_ratio)
        refs += actor.submit_all("scale_lr", g.rollback_lr_factor)
        refs += actor.submit_all("set_clip_ratio", self.clip_ratio)
        self.dispatch.gather({"restore": refs}, time.perf_counter() + g.step_timeout_s, "rollback", self.step + 1)
        if self.pipeline is not None:
            self.pipeline.rollback(self.step, self.consumed)
        self.reporter.warning(
            "rollback", f"step {step}: {verdict.reason}; restored the state before the step, actor LR x"
            f"{g.rollback_lr_factor:g} (now {self.lr_scale:g} of the schedule), clip_ratio {self.clip_ratio:g}",
            {**evidence, "rollbacks": self.rollbacks, "lr_scale": self.lr_scale, "clip_ratio": self.clip_ratio})
