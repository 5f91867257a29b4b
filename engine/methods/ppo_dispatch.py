"""How the PPO driver talks to its roles: per phase, one submission to every worker (a generation
chained with everything that reads only its batch) and one gather bounded by the step's deadline (the
step watchdog), plus the idle calls that keep an FSDP2 role's workers in the same collectives.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from engine.config import PPOConfig
from engine.data import PromptExample
from engine.errors import StepTimeout
from engine.roles.batch import select, shard_rows


def prompt_meta(p: PromptExample) -> dict[str, Any]:
    """What the reward role reads of a prompt besides the response (and a multi-turn episode's
    environment, its spec)."""
    return {"ground_truth": p.ground_truth, "data_source": p.data_source, "prompt": p.text,
            "conversation": p.conversation, "environment": p.environment}


class RoleDispatch:
    """Submissions to, and gathers from, the started roles of one PPO job.

    Args:
        roles: the role cluster (`engine.roles.remote.RoleCluster` or `engine.roles.local.LocalRoleCluster`).
        num_mini_batches: the actor's mini-batches per step (a worker's rows are cut along them).
        lora: the actor computes the reference log-probs (adapter off); there is no `ref` role.
        use_critic: a `critic` role exists (GAE).
        on_policy: the actor takes the old log-probs from its update's own forward (no `old` pass).

    A `teacher` role (on-policy distillation) computes its log-probs of every generated batch too.
    """

    def __init__(self, roles: Any, cfg: PPOConfig, *, num_workers: int, num_mini_batches: int, lora: bool,
                 use_critic: bool, on_policy: bool) -> None:
        self.roles, self.cfg = roles, cfg
        self.num_workers, self.num_mini_batches = num_workers, num_mini_batches
        self.lora, self.use_critic, self.on_policy = lora, use_critic, on_policy
        self.teacher = "teacher" in roles  # distill_policy: the teacher scores each generated batch

    def gather(self, refs: dict[str, list[Any]], deadline: float, phase: str, step: int) -> dict[str, list[Any]]:
        """One `ray.get` for every ref of a phase of `step`, bounded by the step's deadline."""
        keys = [(k, len(v)) for k, v in refs.items()]
        flat = [r for v in refs.values() for r in v]
        try:
            values = self.roles.get(flat, timeout=max(0.0, deadline - time.perf_counter()))
        except TimeoutError:  # Ray's GetTimeoutError is one too
            timeout = self.cfg.guardrails.step_timeout_s
            raise StepTimeout(f"step {step} ran past step_timeout_s={timeout:g} ({phase})",
                              data={"step": step, "phase": phase, "timeout_s": timeout}) from None
        out, i = {}, 0
        for key, n in keys:
            out[key], i = values[i:i + n], i + n
        return out

    def submit_rollout(self, prompts: list[list[int]], seeds: list[int], meta: list[dict[str, Any]], *,
                       validate: bool, extra_batch: dict[str, torch.Tensor] | None = None, greedy: bool = False,
                       ) -> tuple[dict[str, list[Any]], list[int]]:
        """Submit generation and everything that depends only on it, for every worker (`validate`:
        generation and scores only; `greedy`: argmax decoding, ReMax's baseline).

        Returns the refs by kind and the row order of the shards (results concatenate in it).
        """
        roles = self.roles
        shards, _ = shard_rows(len(prompts), 1 if validate else self.num_mini_batches, self.num_workers)
        refs: dict[str, list[Any]] = {k: [] for k in ("batch", "gen", "old", "ref", "values", "scores", "teacher")}
        ref_role = roles["actor"] if self.lora else roles["ref"]
        idle = (["actor"] if validate else ["actor", "actor", "critic"])
        for w, rows in enumerate(shards):
            if not rows:  # fsdp2 roles: still join the collective unshard of each phase
                refs.setdefault("idle", []).extend(self.idle(w, idle))
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
                if self.teacher:
                    then.append(("teacher", roles["teacher"], "compute_teacher_log_prob", ()))
            # A multi-turn episode's environment comes with its row's meta (`ActorRollout.generate`).
            episodes = ([meta[i] for i in rows],) if self.cfg.rollout.multi_turn.enable else ()
            batch, seconds, *outs = roles["actor"].submit_then(
                w, "generate", ([prompts[i] for i in rows], [seeds[i] for i in rows], validate, greedy, *episodes),
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
                for w in range(1, self.sp(role)):
                    refs.setdefault("idle", []).append(roles[role].submit(w, method, none))
            for w in range(1, self.num_workers):
                refs.setdefault("idle", []).extend(self.idle(w, [r for r in ("actor", "critic") if w >= self.sp(r)]))
        return refs, [r for rows in shards for r in rows]

    def sp(self, role: str) -> int:
        """`role`'s `ulysses_sequence_parallel_size` (workers that share rows)."""
        return getattr(self.cfg, role).ulysses_sequence_parallel_size

    def sharded(self, role: str) -> bool:
        """True when `role` runs FSDP2 over several workers (`engine.runtime.sharding`)."""
        if role == "critic" and not self.use_critic:
            return False
        return self.num_workers > 1 and getattr(self.cfg, role).strategy == "fsdp2"

    def idle(self, worker: int, roles: Sequence[str]) -> list[Any]:
        """`idle_gather` on `worker` for each sharded role of `roles`, in order."""
        return [self.roles[r].submit(worker, "idle_gather") for r in roles if self.sharded(r)]

    def submit_rank0(self, role: str, method: str, *args: Any) -> list[Any]:
        """Rank 0 only, or every worker of an fsdp2 role (each writes or gathers its shards)."""
        group = self.roles[role]
        return group.submit_all(method, *args) if self.sharded(role) else [group.submit(0, method, *args)]
