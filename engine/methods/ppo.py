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
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from engine.algos import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_in_reward,
    kl_penalty,
    masked_mean,
)
from engine.algos.correction import logprob_gap
from engine.config import JobRequest, JobResult, PPOConfig, check_parallel
from engine.data import PromptExample, load_rows, tokenize_prompts
from engine.errors import Cancelled, ConfigError, DataError, Diverged, Paused, StepTimeout
from engine.guardrails import (
    ReplayBuffer,
    Verdict,
    distinct_ratio,
    judge_collapse,
    judge_step,
    overfit_gap,
    reward_filter_mask,
    sequence_mean_kl,
)
from engine.methods import ppo_experience as experience
from engine.models import load_tokenizer
from engine.rewards.rules import rule_reward_kwargs
from engine.roles.batch import build_batch, concat, select, shard_rows
from engine.rollout.sampling import row_seed
from engine.rollout.vllm import vllm_available
from engine.runtime.artifacts import for_request, is_remote, join
from engine.runtime.checkpoint import COMPLETE, CheckpointError, atomic_dir, step_dir
from engine.runtime.cluster import connect
from engine.runtime.distributed import start_group
from engine.runtime.reporting import Reporter
from engine.runtime.watchdog import MaxDurationExceeded

STARTUP_TIMEOUT_S = 900.0
"""Reserving resources and loading every role's model (not a training step: no step watchdog)."""
VAL_STREAM = 0x7FFF_FFFF
"""Batch number used in validation row seeds (training batches count from 0)."""


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

    # --- setup ---------------------------------------------------------------------------------

    def _load_data(self) -> None:
        cfg, req = self.cfg, self.request
        tokenizer = load_tokenizer(self.artifacts.stage(req.model_path))
        self.tokenizer, self.pad_id = tokenizer, tokenizer.pad_token_id
        rows = load_rows(self.artifacts.stage(req.training_file), "prompts")
        self.train = tokenize_prompts(rows, tokenizer, cfg.data.max_prompt_length, cfg.data.truncation,
                                      filter_overlong_prompts=cfg.data.filter_overlong_prompts)
        self.val: list[PromptExample] = []
        if req.validation_file:
            val_rows = load_rows(self.artifacts.stage(req.validation_file), "prompts")
            self.val = tokenize_prompts(val_rows, tokenizer, cfg.data.max_prompt_length, cfg.data.truncation,
                                        filter_overlong_prompts=cfg.data.filter_overlong_prompts)
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
                          {"total_steps": self.total_steps, "rollout": self._rollout_backend(), **common},
                          num_workers=w, data_parallel=True)]
        if self.use_critic:
            specs.append(RoleSpec("critic", Critic, (cfg, req.model_path),
                                  {"total_steps": self.total_steps, **common}, num_workers=w, data_parallel=True))
        if not self.lora:  # a process group only for sequence parallelism (the reference never steps)
            specs.append(RoleSpec("ref", Reference, (cfg, req.model_path), common, num_workers=w,
                                  data_parallel=cfg.ref.ulysses_sequence_parallel_size > 1))
        is_model = "model_path" in reward or bool((reward.get("grading") or {}).get("models"))  # score_model
        specs.append(RoleSpec("reward", Reward, (cfg,), {"tokenizer_path": req.model_path, **reward, **common},
                              num_workers=w if is_model else 1, uses_gpu=is_model))
        if req.resources.executor == "local":
            from engine.roles.local import LocalRoleCluster as Cluster
        else:
            from engine.roles.remote import RoleCluster as Cluster
        self.roles = start_group(lambda: Cluster(specs, req.resources, startup_timeout_s=STARTUP_TIMEOUT_S))
        self.reporter.placement(self.roles.placement())

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
        state = self._gather({"load": refs}, time.perf_counter() + self.cfg.guardrails.step_timeout_s,
                             "resume")["load"][0]["trainer"]
        self._restore_progress(state)
        self.rollbacks = int(state["rollbacks"])
        self.rollback_history = list(state.get("rollback_history", []))
        self.lr_scale, self.clip_ratio = float(state["lr_scale"]), state["clip_ratio"]
        if self.clip_ratio is not None:
            self._gather({"clip": self.roles["actor"].submit_all("set_clip_ratio", self.clip_ratio)},
                         time.perf_counter() + 60, "resume")
        position = self._check_resumed(path, state)
        self.reporter.log(f"resumed from {path}: continuing after step {self.step} at data position "
                          f"{self.consumed} (batches consumed), {position} actor updates (checked)")

    def _check_resumed(self, path: str, state: dict[str, Any]) -> int:
        """The resume invariants: the loop continues at the step the checkpoint is named for, with
        the data position its steps consumed and the optimizer where its updates left it. A
        checkpoint whose recorded state disagrees would skip or repeat data silently: it fails.
        Returns the actor's scheduler position."""
        problems = []
        named = re.search(r"step_(\d+)/*$", str(path))
        if named and int(named.group(1)) != self.step:
            problems.append(f"the checkpoint is step {named.group(1)} but records step {self.step}")
        gen_batches = self.cfg.algorithm.filter_groups.enable  # dynamic sampling may read more batches
        if self.consumed < self.step or (not gen_batches and self.consumed != self.step):
            problems.append(f"data position {self.consumed} does not follow from {self.step} steps")
        updates = self._gather({"pos": self.roles["actor"].submit_all("optimizer_position")},
                               time.perf_counter() + 60, "resume")["pos"]
        expected = int(state.get("actor_updates", max(0, self.step - self.cfg.trainer.critic_warmup)))
        if any(u != expected for u in updates):
            problems.append(f"the actor's optimizer schedule is at {updates[0]} updates, {expected} recorded")
        if problems:
            raise CheckpointError(f"cannot resume from {path}: " + "; ".join(problems), param="resume_from",
                                  data={"step": self.step, "consumed": self.consumed, "actor_updates": updates[0],
                                        "expected_actor_updates": expected})
        return expected

    # --- helpers -------------------------------------------------------------------------------

    def _check_stop(self) -> None:
        if self.reporter.should_stop():
            raise Cancelled(f"cancelled after step {self.step}", data={"step": self.step})

    def _gather(self, refs: dict[str, list[Any]], deadline: float, phase: str) -> dict[str, list[Any]]:
        """One `ray.get` for every ref of a phase, bounded by the step's deadline."""
        keys = [(k, len(v)) for k, v in refs.items()]
        flat = [r for v in refs.values() for r in v]
        try:
            values = self.roles.get(flat, timeout=max(0.0, deadline - time.perf_counter()))
        except TimeoutError:  # Ray's GetTimeoutError is one too
            timeout = self.cfg.guardrails.step_timeout_s
            raise StepTimeout(f"step {self.step + 1} ran past step_timeout_s={timeout:g} ({phase})",
                              data={"step": self.step + 1, "phase": phase, "timeout_s": timeout}) from None
        out, i = {}, 0
        for key, n in keys:
            out[key], i = values[i:i + n], i + n
        return out

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

    @staticmethod
    def _meta(p: PromptExample) -> dict[str, Any]:
        return {"ground_truth": p.ground_truth, "data_source": p.data_source, "prompt": p.text,
                "conversation": p.conversation}

    def _submit_rollout(self, prompts: list[list[int]], seeds: list[int], meta: list[dict[str, Any]], *,
                        validate: bool, extra_batch: dict[str, torch.Tensor] | None = None, greedy: bool = False,
                        ) -> tuple[dict[str, list[Any]], list[int]]:
        """Submit generation and everything that depends only on it, for every worker (`validate`:
        generation and scores only; `greedy`: argmax decoding, ReMax's baseline).

        Returns the refs by kind and the row order of the shards (results concatenate in it).
        """
        roles = self.roles
        shards, _ = shard_rows(len(prompts), 1 if validate else self.num_mini_batches, self.num_workers)
        refs: dict[str, list[Any]] = {k: [] for k in ("batch", "gen", "old", "ref", "values", "scores")}
        ref_role = roles["actor"] if self.lora else roles["ref"]
        idle = (["actor"] if validate else ["actor", "actor", "critic"])
        for w, rows in enumerate(shards):
            if not rows:  # fsdp2 roles: still join the collective unshard of each phase
                refs.setdefault("idle", []).extend(self._idle(w, idle))
                continue
            # Everything that reads only the generated batch, chained behind the generation (one call
            # on a colocated worker): its scores, then old log-probs, reference log-probs and values.
            then: list[tuple[str, Any, str, tuple]] = [("scores", roles["reward"], "compute_scores",
                                                        ([meta[i] for i in rows],))]
            if not validate:
                if not self.on_policy:
                    then.append(("old", roles["actor"], "compute_log_prob", ()))
                then.append(("ref", ref_role, "compute_ref_log_prob", ()))
                if self.use_critic:
                    then.append(("values", roles["critic"], "compute_values", ()))
            batch, seconds, *outs = roles["actor"].submit_then(
                w, "generate", ([prompts[i] for i in rows], [seeds[i] for i in rows], validate, greedy),
                [(group, method, args) for _, group, method, args in then], num_returns=2)
            refs["batch"].append(batch)
            refs["gen"].append(seconds)
            for (kind, *_), out in zip(then, outs, strict=True):
                refs[kind].append(out)
        if extra_batch is not None:  # replayed samples: fresh log-probs and values, stored scores
            # Worker 0 scores them; the rest of a sequence-parallel group joins it with no rows of its own.
            none = select(extra_batch, [])
            calls = [("extra_old", "actor", "compute_log_prob"),
                     ("extra_ref", "actor" if self.lora else "ref", "compute_ref_log_prob")]
            if self.use_critic:
                calls.append(("extra_values", "critic", "compute_values"))
            for kind, role, method in calls:
                refs[kind] = [roles[role].submit(0, method, extra_batch)]
                for w in range(1, self._sp(role)):
                    refs.setdefault("idle", []).append(roles[role].submit(w, method, none))
            for w in range(1, self.num_workers):
                refs.setdefault("idle", []).extend(self._idle(w, [r for r in ("actor", "critic") if w >= self._sp(r)]))
        return refs, [r for rows in shards for r in rows]

    def _sp(self, role: str) -> int:
        """`role`'s `ulysses_sequence_parallel_size` (workers that share rows)."""
        return getattr(self.cfg, role).ulysses_sequence_parallel_size

    def _sharded(self, role: str) -> bool:
        """True when `role` runs FSDP2 over several workers (`engine.runtime.sharding`)."""
        if role == "critic" and not self.use_critic:
            return False
        return self.num_workers > 1 and getattr(self.cfg, role).strategy == "fsdp2"

    def _idle(self, worker: int, roles: Sequence[str]) -> list[Any]:
        """`idle_gather` on `worker` for each sharded role of `roles`, in order."""
        return [self.roles[r].submit(worker, "idle_gather") for r in roles if self._sharded(r)]

    def _submit_rank0(self, role: str, method: str, *args: Any) -> list[Any]:
        """Rank 0 only, or every worker of an fsdp2 role (each writes or gathers its shards)."""
        group = self.roles[role]
        return group.submit_all(method, *args) if self._sharded(role) else [group.submit(0, method, *args)]

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
            fmt = self._gather({"save": self._submit_rank0("actor", "save_model", self.request.output_dir)},
                               time.perf_counter() + self.cfg.guardrails.step_timeout_s, "save_model")["save"][0]
            return JobResult(output_dir=self.request.output_dir, model_format=fmt, model_kind="policy",
                             metrics=dict(self.final_metrics))
        finally:
            self.roles.shutdown()

    def _baseline_validation(self) -> None:
        """`trainer.val_before_train`: the untrained policy's validation, logged at step 0."""
        metrics = self._validate(time.perf_counter() + self.cfg.guardrails.step_timeout_s)
        self._collapse(0, None, metrics)  # at step 0 a collapse can only be reported
        self.reporter.metrics(0, metrics, total_steps=self.total_steps, epoch=0)

    def _collapse(self, step: int, entropy: float | None, metrics: dict[str, float]) -> Verdict:
        """Judge the step's generations (`judge_collapse`); a `warn` verdict is reported here with a
        few decoded offending validation responses, a `rollback` one is left to the caller."""
        responses = self.val_responses if "val/reward/mean" in metrics else None
        eos = [self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else []
        verdict = judge_collapse(entropy, responses, self.cfg.guardrails, eos)
        if verdict.action == "ok":
            return verdict
        rows = verdict.evidence.get("sample_rows", [])
        samples = [{"prompt": self.val[i].text[-200:],
                    "response": self.tokenizer.decode(responses[i], skip_special_tokens=False)[:200]}
                   for i in rows] if responses is not None else []
        verdict = Verdict(verdict.action, verdict.reason, {**verdict.evidence, "samples": samples})
        if verdict.action == "warn" or step == 0:
            self.reporter.warning("collapse", f"step {step}: {verdict.reason}", {"step": step, **verdict.evidence})
        return verdict

    def _save_boundary(self, resumed_at: int) -> None:
        """Checkpoint the last finished step on the way out (pause, time limit), unless it has one."""
        freq = self.cfg.trainer.save_freq
        if self.step > resumed_at and not (freq > 0 and self.step % freq == 0):
            self._save_checkpoint(self.step, self.final_metrics,
                                  time.perf_counter() + self.cfg.guardrails.step_timeout_s)

    def _train_step(self) -> None:
        """One PPO iteration; on a guardrail trip it rolls back instead and the loop retries the step."""
        cfg = self.cfg
        step_start = time.perf_counter()
        deadline = step_start + cfg.guardrails.step_timeout_s
        start_state = self._state()
        step = self.step + 1
        epoch, prompts = self._prompts(self.consumed)

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
        adv = self._advantages(rollout)

        self._check_stop()
        if self.fault_hook is not None:
            self.fault_hook(self, step)
        updates, new_log_probs, sampling_log_probs = self._update_phase(step, rollout, adv, deadline)

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
        metrics.update(self._logprob_gap(step, rollout, sampling_log_probs, mask))
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
        collapse = self._collapse(step, metrics.get("actor/entropy"), metrics)
        if collapse.action == "rollback":
            self._rollback(step, collapse, start_state)
            return
        if last:
            metrics.update(self._overfit(metrics))
        step_time = time.perf_counter() - step_start
        metrics["timing_s/step"] = step_time
        metrics["perf/throughput"] = metrics["perf/total_num_tokens"] / step_time / self.num_workers
        metrics["training/epoch"] = float(epoch + 1)
        self.reporter.metrics(step, metrics, total_steps=self.total_steps, epoch=epoch + 1)
        self.final_metrics = metrics

        save_freq = cfg.trainer.save_freq
        if last or (save_freq > 0 and step % save_freq == 0):
            self._save_checkpoint(step, metrics, deadline)

    def _rollout_phase(self, prompts: list[PromptExample], deadline: float, *, batch_index: int,
                       snapshot: bool = True) -> dict[str, Any]:
        """Snapshot the last good state (unless `snapshot` is False: a further generation batch of
        the same step), then generate `rollout.n` samples per prompt and compute old log-probs,
        reference log-probs, values, scores (shaped by `reward.overlong_buffer`) and, for ReMax, the
        greedy baseline's scores: one submission, one gather.

        Returns the batch in row order (prompt-major) with `old`, `ref`, `values` (None without a
        critic), `scores`, `baselines` (ReMax, else None), `overlong` (the penalties, or None),
        `uids` (prompt index per row), `prompts`, `new_rows` (rows sampled now; replayed rows follow),
        `replayed` and the workers' timings.
        """
        cfg, roles = self.cfg, self.roles
        trained = [roles["actor"]] + ([roles["critic"]] if self.use_critic else [])
        snapshots = [r for g in trained for r in g.submit_all("snapshot")] if snapshot else []
        rows = [p for p in prompts for _ in range(cfg.rollout.n)]
        uids = [i for i in range(len(prompts)) for _ in range(cfg.rollout.n)]
        seeds = [row_seed(self.request.seed, batch_index, i) for i in range(len(rows))]
        replayed = self.replay.take()
        extra = build_batch([r["prompt"] for r in replayed], [r["response"] for r in replayed],
                            prompt_width=cfg.data.max_prompt_length, response_width=cfg.data.max_response_length,
                            pad_id=self.pad_id) if replayed else None
        refs, order = self._submit_rollout([p.prompt_ids for p in rows], seeds, [self._meta(p) for p in rows],
                                           validate=False, extra_batch=extra)
        baseline_order: list[int] = []
        if cfg.algorithm.adv_estimator == "remax":  # one greedy response per prompt: its score is the baseline
            greedy, baseline_order = self._submit_rollout(
                [p.prompt_ids for p in prompts], seeds[:len(prompts)], [self._meta(p) for p in prompts],
                validate=True, greedy=True)
            refs["baseline_scores"], refs["baseline_gen"] = greedy["scores"], greedy["gen"]
            refs["baseline_batch"] = greedy["batch"]
        out = self._gather({**refs, "snapshot": snapshots}, deadline, "rollout")

        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(order))
        result: dict[str, Any] = {
            "batch": select(concat(out["batch"]), inverse),
            "old": torch.cat([o["log_probs"] for o in out["old"]])[inverse] if out["old"] else None,
            "ref": torch.cat([o["log_probs"] for o in out["ref"]])[inverse],
            "values": torch.cat([o["values"] for o in out["values"]])[inverse] if self.use_critic else None,
            "scores": torch.cat([o["scores"] for o in out["scores"]])[inverse],
            "baselines": None, "overlong": None,
            "uids": uids, "prompts": rows, "new_rows": len(rows), "replayed": len(replayed),
            "timing": {
                "timing_s/gen": max(out["gen"]),
                "timing_s/snapshot": max((o["time_s"] for o in out["snapshot"]), default=0.0),
                **({"timing_s/old_log_prob": max(o["time_s"] for o in out["old"])} if out["old"] else {}),
                "timing_s/ref": max(o["time_s"] for o in out["ref"]),
                "timing_s/reward": max(o["time_s"] for o in out["scores"]),
                **({"timing_s/values": max(o["time_s"] for o in out["values"])} if self.use_critic else {}),
            },
        }
        if replayed:  # replayed rows: fresh log-probs and values, the scores they earned
            sampled = result["batch"]
            extra["policy_version"] = sampled["policy_version"][:1].expand(len(replayed), -1).clone()
            if "rollout_log_probs" in sampled:  # re-scored now: the trainer's own log-probs, no gap
                extra["rollout_log_probs"] = out["extra_old"][0]["log_probs"].float()
            result["batch"] = concat([result["batch"], extra])
            result["old"] = torch.cat([result["old"], out["extra_old"][0]["log_probs"]])
            result["ref"] = torch.cat([result["ref"], out["extra_ref"][0]["log_probs"]])
            result["scores"] = torch.cat([result["scores"], torch.tensor([r["score"] for r in replayed])])
            if self.use_critic:
                result["values"] = torch.cat([result["values"], out["extra_values"][0]["values"]])
            result["uids"] = uids + [-1 - j for j in range(len(replayed))]
        new = slice(0, len(rows))
        lengths = result["batch"]["response_mask"][new].sum(-1)
        result["scores"][new], result["overlong"] = experience.shape_scores(result["scores"][new], lengths, cfg)
        if baseline_order:
            # The baseline is shaped as the samples are (DAPO's overlong penalty on its own length).
            greedy_lengths = concat(out["baseline_batch"])["response_mask"].sum(-1)
            greedy_scores, _ = experience.shape_scores(
                torch.cat([o["scores"] for o in out["baseline_scores"]]).float(), greedy_lengths, cfg)
            per_prompt = torch.empty(len(prompts))
            per_prompt[torch.tensor(baseline_order)] = greedy_scores
            result["baselines"] = per_prompt[torch.tensor(uids)]
            result["timing"]["timing_s/gen_baseline"] = max(out["baseline_gen"])
        return result

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

    def _advantages(self, rollout: dict[str, Any]) -> dict[str, Any]:
        """Scores on the last response token, PF-PPO filtering, the KL penalty in the reward (and the
        KL controller update), then the advantages of `algorithm.adv_estimator`."""
        cfg = self.cfg
        start = time.perf_counter()
        batch, scores, values = rollout["batch"], rollout["scores"], rollout["values"]
        mask = batch["response_mask"]
        lengths = mask.sum(-1)
        token_scores = torch.zeros(mask.shape, dtype=torch.float32)
        token_scores[torch.arange(len(scores)), (lengths - 1).clamp(min=0)] = scores
        new_rows = rollout["new_rows"]
        keep = torch.ones(len(scores), dtype=torch.bool)
        rf = cfg.guardrails.reward_filter
        if rf.enable:  # random tie-breaks from (seed, step): a resumed or retried step filters the same
            generator = torch.Generator().manual_seed(row_seed(self.request.seed, self.consumed, VAL_STREAM - 1))
            keep[:new_rows] = reward_filter_mask(scores[:new_rows], rollout["uids"][:new_rows], rf.mode, generator)
        loss_mask = mask * keep[:, None]
        # On-policy there are no old log-probs yet: `_train_step` fills the KL in from the update's.
        kl = None if rollout["old"] is None else kl_penalty(rollout["old"], rollout["ref"], cfg.algorithm.kl_penalty)
        current_kl = None if kl is None else float(masked_mean(kl, mask, dim=-1).mean())
        beta = self.kl_ctrl.value
        if cfg.algorithm.use_kl_in_reward:
            rewards = apply_kl_in_reward(token_scores, kl, beta, mask)
            self.kl_ctrl.update(current_kl, n_steps=len(scores))
        else:
            rewards = token_scores
        advantages, returns = experience.advantages(cfg.algorithm, rewards, mask, keep, rollout)
        raw_advantages = returns - values if self.use_critic else advantages
        if rf.enable and rf.replay_buffer_size:
            self.replay.push([{"prompt": rollout["prompts"][i].prompt_ids,
                               "response": batch["responses"][i, :int(lengths[i])].tolist(),
                               "score": float(scores[i])} for i in range(new_rows) if keep[i]])
        return {"rewards": rewards, "advantages": advantages, "returns": returns, "raw_advantages": raw_advantages,
                "keep": keep, "loss_mask": loss_mask, "current_kl": current_kl, "beta": beta,
                "seconds": time.perf_counter() - start}

    def _update_phase(self, step: int, rollout: dict[str, Any], adv: dict[str, Any],
                      deadline: float) -> tuple[dict[str, list[Any]], torch.Tensor, torch.Tensor | None]:
        """Critic and actor updates, submitted together (the actor only after `critic_warmup`).

        Returns the workers' results, the updated policy's log-probs of the batch (the rollout
        log-probs when the actor did not update) and, on-policy, the sampling policy's log-probs
        the update computed before its step (else None).
        """
        roles, old = self.roles, rollout["old"]
        train = dict(rollout["batch"], response_mask=adv["loss_mask"],
                     ref_log_probs=rollout["ref"], advantages=adv["advantages"], returns=adv["returns"])
        if old is not None:  # on-policy: the actor takes its own forward's log-probs as the old ones
            train["old_log_probs"] = old
        if self.use_critic:
            train["values"] = rollout["values"]
        n = len(rollout["ref"])
        refs: dict[str, list[Any]] = {"actor": [], "critic": []}
        if self.use_critic:
            c_rows, c_sizes = shard_rows(n, self.num_critic_mini_batches, self.num_workers)
            refs["critic"] = [roles["critic"].submit(w, "update_critic", select(train, r), s)
                              for w, (r, s) in enumerate(zip(c_rows, c_sizes))]
        a_rows, a_sizes = shard_rows(n, self.num_mini_batches, self.num_workers)
        if step > self.cfg.trainer.critic_warmup:
            refs["actor"] = [roles["actor"].submit(w, "update_actor", select(train, r), s)
                             for w, (r, s) in enumerate(zip(a_rows, a_sizes))]
        updates = self._gather(refs, deadline, "update")
        if not updates["actor"]:
            return updates, old, None
        new_log_probs = torch.empty_like(rollout["ref"])
        sampling = torch.empty_like(rollout["ref"]) if old is None else None
        for r, result in zip(a_rows, updates["actor"]):
            new_log_probs[torch.tensor(r)] = result["log_probs"]
            if sampling is not None:
                sampling[torch.tensor(r)] = result["sampling_log_probs"]
        return updates, new_log_probs, sampling

    def _logprob_gap(self, step: int, rollout: dict[str, Any], sampling_log_probs: torch.Tensor | None,
                     mask: torch.Tensor) -> dict[str, float]:
        """`rollout/logprob_diff/mean|max`: the rollout engine's log-probs of the sampled tokens vs
        the trainer's forward on them under the same weights (the old log-probs); a `logprob_gap`
        warning above `guardrails.max_logprob_diff`. Nothing when the backend gave no log-probs."""
        batch = rollout["batch"]
        trainer = rollout["old"] if rollout["old"] is not None else sampling_log_probs
        if "rollout_log_probs" not in batch or trainer is None:
            return {}
        mean, top = logprob_gap(batch["rollout_log_probs"], trainer, mask)
        limit = self.cfg.guardrails.max_logprob_diff
        if limit is not None and mean > limit:
            self.reporter.warning("logprob_gap", f"step {step}: the rollout engine's log-probs differ from the "
                                  f"trainer's by {mean:.4f} per token on average (max_logprob_diff {limit:g})",
                                  {"step": step, "mean": mean, "max": top, "max_logprob_diff": limit})
        return {"rollout/logprob_diff/mean": mean, "rollout/logprob_diff/max": top}

    def _validate(self, deadline: float) -> dict[str, float]:
        """Greedy (`rollout.val_temperature`) responses to the validation prompts, scored; the
        responses are kept in `val_responses` (collapse guardrail)."""
        if not self.val:
            return {}
        start = time.perf_counter()
        size = self.cfg.data.val_batch_size or len(self.val)
        refs: dict[str, list[Any]] = {"scores": [], "batch": []}
        orders = []
        for lo in range(0, len(self.val), size):
            chunk = self.val[lo:lo + size]
            seeds = [row_seed(self.request.seed, VAL_STREAM, lo + i) for i in range(len(chunk))]
            chunk_refs, order = self._submit_rollout([p.prompt_ids for p in chunk], seeds,
                                                     [self._meta(p) for p in chunk], validate=True)
            orders.append([lo + i for i in order])
            refs["scores"] += chunk_refs["scores"]
            refs["batch"] += chunk_refs["batch"]
        out = self._gather(refs, deadline, "validation")
        scores = torch.cat([o["scores"] for o in out["scores"]])
        order = torch.tensor([i for o in orders for i in o])
        by_row = torch.empty_like(scores)
        by_row[order] = scores
        batch = concat(out["batch"])
        lengths = batch["response_mask"].sum(-1).tolist()
        responses: list[list[int]] = [[] for _ in self.val]
        for j, row in enumerate(order.tolist()):
            responses[row] = batch["responses"][j, :int(lengths[j])].tolist()
        self.val_responses = responses
        metrics = {"val/reward/mean": float(by_row.mean()), "val/distinct_responses": distinct_ratio(responses),
                   "timing_s/testing": time.perf_counter() - start}
        sources = sorted({p.data_source for p in self.val if p.data_source})
        if len(sources) > 1:
            for source in sources:
                idx = [i for i, p in enumerate(self.val) if p.data_source == source]
                metrics[f"val/reward/{source}"] = float(by_row[idx].mean())
        return metrics

    def _overfit(self, metrics: dict[str, float]) -> dict[str, float]:
        if "val/reward/mean" not in metrics or not self.train_scores:
            return {}
        recent = self.train_scores[-self.steps_per_epoch:]
        train_reward = sum(recent) / len(recent)
        spreads = self.train_spreads[-self.steps_per_epoch:]
        spread = sum(spreads) / len(spreads) if spreads else 0.0
        gap, margin, overfit = overfit_gap(train_reward, metrics["val/reward/mean"], spread)
        if overfit:
            self.reporter.warning("overfit", f"validation reward trails training reward by {gap:.3f} "
                                  f"(> {margin:.3f}: max(0.05, half the training scores' spread {spread:.3f}))",
                                  {"train_reward": train_reward, "val_reward": metrics["val/reward/mean"],
                                   "gap": gap, "margin": margin, "spread": spread})
        return {"val/overfit_gap": gap, "train/reward/mean": train_reward}

    def _save_checkpoint(self, step: int, metrics: dict[str, float], deadline: float) -> None:
        start = time.perf_counter()
        final = step_dir(self.request.checkpoint_dir, step)
        parts = ("actor", "critic") if self.use_critic else ("actor",)

        def save_parts(root: str) -> None:
            refs = self._submit_rank0("actor", "save_checkpoint", join(root, "actor"), {"trainer": self._state()})
            if self.use_critic:
                refs += self._submit_rank0("critic", "save_checkpoint", join(root, "critic"))
            self._gather({"save": refs}, deadline, "checkpoint")
            for role in parts:
                # Each role's part is a complete checkpoint of its own (`load_state` checks the marker).
                self.artifacts.put_marker(join(root, role))

        if is_remote(final):
            # Each role uploads its part from its own node; the step's marker goes last.
            self.artifacts.remove(final)
            save_parts(final)
            self.artifacts.put_marker(final)
        else:
            with atomic_dir(final) as tmp:  # the step directory appears only when the whole of it is complete
                save_parts(tmp)
        self.reporter.checkpoint(step, final, {**metrics, "timing_s/save_checkpoint": time.perf_counter() - start})

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
        self._gather({"restore": refs}, time.perf_counter() + g.step_timeout_s, "rollback")
        self.reporter.warning(
            "rollback", f"step {step}: {verdict.reason}; restored the state before the step, actor LR x"
            f"{g.rollback_lr_factor:g} (now {self.lr_scale:g} of the schedule), clip_ratio {self.clip_ratio:g}",
            {**evidence, "rollbacks": self.rollbacks, "lr_scale": self.lr_scale, "clip_ratio": self.clip_ratio})
