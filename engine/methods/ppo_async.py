"""Pipelined rollout for the PPO driver (`rollout.mode: one_step_off | async`, or `rollout.colocate:
false`): generation of the next batches runs while the trainer updates on the current one.

The schedule is fixed, so a run is reproducible and resumes exactly: with staleness s (`sync` 0,
`one_step_off` 1, `async` `max_staleness`), training batch b is generated with the policy of version
max(0, b - s) (version v: the weights after v accepted steps), and is submitted as soon as that
version exists, i.e. right after step b - s. The trainer of step b + 1 holds version b, so no sample
is more than s versions behind. A batch is generated whole on one version (`partial: finish`: a
generation in flight at a weight update finishes on the old weights, counted stale), or in two halves
of whole prompt groups, the second on the next version (`partial: continue`, submitted right after
that update): either way a GRPO group never mixes versions.

Weights go from the actor (rank 0) to every rollout worker by version, queued before the generations
that need them, so the trainer never waits longer than the copy: through the Ray object store
(`rollout.weight_sync: object_store`: `export_weights`, read once per worker by `load_weights`) or
broadcast over a process group of the actor's rank 0 and the rollout workers (`collective`: gloo on
CPU, NCCL on GPU, `engine.runtime.weight_sync`; unset: collective on GPU). Each worker reports the
fingerprint it then holds and the driver checks it against the trainer's (`weight_sync_failed`). With `rollout.colocate` (one_step_off
only) the actor generates: the next batch's generation is queued on it ahead of the update.

Off-policy correctness: each row keeps the version it was sampled from and the behaviour policy's
log-probs (`rollout_log_probs`). With stale samples and no `algorithm.rollout_correction` those are
PPO's old log-probs, so the ratio and its clip are taken against the policy that sampled; with it
the old log-probs are the trainer's (the proximal policy) and the truncated / masked IS weights
pi_old / pi_behaviour correct for the gap (`engine.algos.correction`); stale modes default to
`rollout_is: token` (`engine.config.building`: clipped against a policy two versions back, the
update drops tokens and learns less per step). Fresh samples (`sync`) take the trainer's own, as
the colocated loop does.

A checkpoint records the batches in flight (responses, behaviour log-probs, versions): a resumed job
trains on exactly what the uninterrupted one would have. A guardrail rollback drops them and
regenerates from the restored weights.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.config import PPOConfig
from engine.errors import ConfigError, EngineError
from engine.methods import ppo_experience as experience
from engine.methods.ppo_dispatch import RoleDispatch, prompt_meta
from engine.rewards.code_tests import reward_metrics
from engine.roles.batch import Batch, build_batch, concat, select, shard_rows
from engine.roles.local import LocalRoleGroup
from engine.rollout.sampling import row_seed


@dataclass
class Segment:
    """Rows of one batch generated on one version: per worker, its rows and the refs of its call."""

    rows: list[int]
    target: int
    version: int | None = None
    calls: list[tuple[list[int], Any, Any]] = field(default_factory=list)
    submitted_at: float = 0.0
    done: dict[str, Any] | None = None
    """Gathered: `batch` (rows in `rows` order) and the workers' timings."""


class RolloutPipeline:
    """The batches in flight and the weights the rollout workers hold.

    Args:
        dispatch: the job's `RoleDispatch`; `group` generates (`rollout`, or `actor` when colocated).
        prompts_of: the prompts of training batch `index` (the driver's data order).
        seed: the job's seed (row seeds count from it and the batch index, as in `sync`).
        total_batches: the batches the job trains on (none is generated past the last).
    """

    def __init__(self, dispatch: RoleDispatch, cfg: PPOConfig, *, prompts_of: Any, seed: int, pad_id: int,
                 total_batches: int) -> None:
        self.dispatch, self.cfg = dispatch, cfg
        self.separate = not cfg.rollout.colocate
        self.group = dispatch.roles["rollout" if self.separate else "actor"]
        self.prompts_of, self.seed, self.pad_id = prompts_of, seed, pad_id
        self.total_batches = total_batches
        self.staleness = cfg.rollout.staleness
        self.flights: dict[int, list[Segment]] = {}
        self.version = 0
        self.pushed: int | None = None
        self.loads: list[tuple[int, int | None, list[Any]]] = []
        self.sync_s = 0.0
        self.busy: list[tuple[float, float]] = []
        self.wait_rollout = 0.0
        self.correct = bool(cfg.algorithm.rollout_correction.rollout_is or cfg.algorithm.rollout_correction.rollout_rs)
        self.weight_sync = cfg.rollout.weight_sync
        """How weights reach the rollout workers (`object_store` or `collective`; resolved at `start`)."""
        self.broadcasts = 0
        self.joined = False

    # --- schedule ------------------------------------------------------------------------------

    def _segments(self, index: int) -> list[Segment]:
        n, groups = self.cfg.rollout.n, self.cfg.data.train_batch_size
        first = max(0, index - self.staleness)
        if self.cfg.rollout.partial != "continue":
            return [Segment(list(range(groups * n)), first)]
        half = (groups + 1) // 2
        return [Segment(list(range(half * n)), first),
                Segment(list(range(half * n, groups * n)), min(first + 1, index))]

    def start(self, step: int, consumed: int, recorded: dict[str, Any] | None) -> None:
        """Begin at `step` (the trainer holds version `step`) reading batch `consumed`; `recorded`:
        the batches a checkpoint held in flight."""
        self.version = step
        if not self.joined:
            self._join(time.perf_counter() + self.cfg.guardrails.step_timeout_s)
            self.joined = True
        for key, segments in (recorded or {}).items():
            self.flights[int(key)] = [self._restore(int(key), s) for s in segments]
        self._fill(consumed)

    def _fill(self, consumed: int) -> None:
        for index in range(consumed, min(consumed + self.staleness + 1, self.total_batches)):
            segments = self.flights.setdefault(index, self._segments(index))
            for seg in segments:
                if seg.version is None and seg.target <= self.version:
                    self._submit(index, seg)

    def _join(self, deadline: float) -> None:
        """Resolve `rollout.weight_sync` (unset: `collective` on GPU, else `object_store`) and, for
        `collective`, join the trainer's rank 0 and the rollout workers in a group of their own."""
        actor = self.dispatch.roles["actor"]
        if not self.separate:
            self.weight_sync = "object_store"
            return
        local = isinstance(actor, LocalRoleGroup)  # one process, calls in turn: no group to join
        if self.weight_sync is None:
            device = "cpu" if local else self.dispatch.gather({"d": [actor.submit(0, "weight_broadcast", "device")]},
                                                              deadline, "weight_sync", 0)["d"][0]
            self.weight_sync = "collective" if device == "cuda" else "object_store"
        if self.weight_sync != "collective":
            return
        if local:
            raise ConfigError("rollout.weight_sync collective needs resources.executor ray (the in-process "
                              "executor runs the trainer and the rollout worker in one process)",
                              param="rollout.weight_sync")
        endpoint = self.dispatch.gather({"e": [actor.submit(0, "rendezvous")]}, deadline, "weight_sync", 0)["e"][0]
        world = 1 + len(self.group)
        refs = [actor.submit(0, "weight_broadcast", "join", endpoint, world)]
        refs += [self.group.submit(w, "join_weight_group", endpoint, 1 + w, world) for w in range(len(self.group))]
        self.dispatch.gather({"join": refs}, deadline, "weight_sync", 0)

    def _push(self) -> None:
        """The rollout workers load the trainer's current weights (queued ahead of what needs them):
        through the object store (each worker reads the exported tensors) or broadcast from the
        trainer (`collective`: each worker stages them as they arrive, and applies them here in
        order with its generations)."""
        if not self.separate or self.pushed == self.version:
            return
        actor = self.dispatch.roles["actor"]
        if self.weight_sync == "collective":
            self.broadcasts += 1
            seq = self.broadcasts
            meta = actor.submit(0, "weight_broadcast", "send")
            loads = [self.group.submit(w, "load_broadcast", self.broadcasts) for w in range(len(self.group))]
        else:
            seq = None
            weights, meta = actor.submit(0, "export_weights", num_returns=2)
            loads = [self.group.submit(w, "load_weights", weights) for w in range(len(self.group))]
        self.loads.append((self.version, seq, [meta] + loads))
        self.pushed = self.version

    def _submit(self, index: int, seg: Segment) -> None:
        self._push()
        seg.version, seg.submitted_at = self.version, time.time()
        prompts = self.prompts_of(index)
        n = self.cfg.rollout.n
        groups = sorted({r // n for r in seg.rows})
        # Whole prompt groups per worker (a group is generated on one worker, one version).
        per_worker, _ = shard_rows(len(groups), 1, len(self.group))
        for w, group_ids in enumerate(per_worker):
            rows = [g * n + k for i in group_ids for g in [groups[i]] for k in range(n)]
            if not rows:
                continue
            ids = [prompts[r // n].prompt_ids for r in rows]
            seeds = [row_seed(self.seed, index, r) for r in rows]
            args = (ids, seeds) if self.separate else (ids, seeds, False, False)
            batch, timing = self.group.submit(w, "generate", *args, num_returns=2)
            seg.calls.append((rows, batch, timing))

    # --- the step's batch ----------------------------------------------------------------------

    def _gather(self, seg: Segment, deadline: float, step: int) -> None:
        if seg.done is not None:
            return
        out = self.dispatch.gather({"batch": [c[1] for c in seg.calls], "timing": [c[2] for c in seg.calls]},
                                   deadline, "rollout", step)
        rows = [r for c in seg.calls for r in c[0]]
        seconds = []
        for t in out["timing"]:
            if isinstance(t, dict):
                self.busy.append((t["start"], t["end"]))
                seconds.append(t["seconds"])
            else:
                seconds.append(float(t))
        seg.done = {"batch": concat(out["batch"]), "rows": rows, "gen_s": max(seconds, default=0.0)}
        seg.calls = []

    def _check_loads(self, deadline: float, step: int) -> None:
        """Every rollout worker holds exactly the weights the trainer exported for its version."""
        for version, seq, refs in self.loads:
            export, *loaded = self.dispatch.gather({"w": refs}, deadline, "weight_sync", step)["w"]
            self.sync_s = max(self.sync_s, export["time_s"])
            if seq is not None and export["seq"] != seq:  # the trainer's broadcasts and the driver's count differ
                raise EngineError(f"weight sync check: the trainer sent broadcast {export['seq']} for version "
                                  f"{version}, the rollout workers took broadcast {seq}", code="weight_sync_failed",
                                  data={"version": version, "seq": seq, "sent": export["seq"]})
            for w, got in enumerate(loaded):
                if got["fingerprint"] != export["fingerprint"]:
                    raise EngineError(
                        f"weight sync check: rollout worker {w} holds weights fingerprint {got['fingerprint']} "
                        f"after loading version {version}, the trainer's is {export['fingerprint']}",
                        code="weight_sync_failed", data={"worker": w, "version": version,
                                                         "rollout_fingerprint": got["fingerprint"],
                                                         "trainer_fingerprint": export["fingerprint"]})
        self.loads = []

    def generated(self, index: int, deadline: float, step: int) -> tuple[Batch, list[int], float]:
        """Batch `index` as generated (rows in prompt-major order), each row's policy version, and
        the longest generation call's seconds; the wait for it counts as `timing_s/wait_rollout`."""
        start = time.perf_counter()
        self.sync_s = 0.0
        self._fill(index)  # a rollback or resume may have left it unsubmitted
        segments = self.flights[index]
        for seg in segments:
            self._gather(seg, deadline, step)
        self._check_loads(deadline, step)
        self.wait_rollout = time.perf_counter() - start
        rows = [r for seg in segments for r in seg.done["rows"]]
        versions = [seg.version for seg in segments for _ in seg.done["rows"]]
        inverse = torch.empty(len(rows), dtype=torch.long)
        inverse[torch.tensor(rows)] = torch.arange(len(rows))
        batch = select(concat([seg.done["batch"] for seg in segments]), inverse)
        versions = [versions[i] for i in inverse.tolist()]
        lag = self.version - min(versions)
        if lag > self.staleness or max(versions) > self.version:
            raise EngineError(f"weight sync check: batch {index} holds samples {lag} versions behind the trainer's "
                              f"{self.version} (allowed {self.staleness})", code="weight_sync_failed",
                              data={"batch": index, "trainer_version": self.version, "versions": sorted(set(versions))})
        return batch, versions, max(seg.done["gen_s"] for seg in segments)

    def collect(self, index: int, deadline: float, *, step: int, snapshot: bool = True) -> dict[str, Any]:
        """The rollout of step `step` from batch `index`: as `ppo_rollout.collect` returns it, the
        batch generated ahead, now scored (rewards, reference log-probs, values, the trainer's old
        log-probs where the update needs them) in one submission with the trained roles' snapshots."""
        cfg, dispatch = self.cfg, self.dispatch
        batch, versions, gen_s = self.generated(index, deadline, step)
        prompts = self.prompts_of(index)
        rows = [p for p in prompts for _ in range(cfg.rollout.n)]
        roles = dispatch.roles
        trained = [roles["actor"]] + ([roles["critic"]] if dispatch.use_critic else [])
        snapshots = [r for g in trained for r in g.submit_all("snapshot")] if snapshot else []
        shards, _ = shard_rows(len(rows), dispatch.num_mini_batches, dispatch.num_workers)
        # The trainer's own log-probs are the old ones when the samples are fresh (`sync`: as the
        # colocated loop) or with a rollout correction (the proximal policy); otherwise the
        # behaviour policy's, which the batch carries.
        proximal = self.correct or self.staleness == 0
        old_pass = proximal and not dispatch.on_policy
        refs: dict[str, list[Any]] = {k: [] for k in ("old", "ref", "values", "scores")}
        ref_role = roles["actor"] if dispatch.lora else roles["ref"]
        for w, part in enumerate(shards):
            if not part:
                refs.setdefault("idle", []).extend(dispatch.idle(w, ["actor", "actor", "critic"]))
                continue
            shard = select(batch, part)
            refs["scores"].append(roles["reward"].submit(w, "compute_scores", shard, [prompt_meta(rows[i]) for i in part]))
            if old_pass:
                refs["old"].append(roles["actor"].submit(w, "compute_log_prob", shard))
            refs["ref"].append(ref_role.submit(w, "compute_ref_log_prob", shard))
            if dispatch.use_critic:
                refs["values"].append(roles["critic"].submit(w, "compute_values", shard))
        out = dispatch.gather({**refs, "snapshot": snapshots}, deadline, "rollout", step)
        order = [r for part in shards for r in part]
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(order))
        if old_pass:
            old = torch.cat([o["log_probs"] for o in out["old"]])[inverse]
        elif proximal:
            old = None  # on-policy update: its own forward is the proximal policy
        else:
            old = batch["rollout_log_probs"]
        scores = torch.cat([o["scores"] for o in out["scores"]])[inverse]
        scores, overlong = experience.shape_scores(scores, batch["response_mask"].sum(-1), cfg)
        lags = torch.tensor([self.version - v for v in versions], dtype=torch.float32)
        return {
            "batch": batch, "old": old,
            "ref": torch.cat([o["log_probs"] for o in out["ref"]])[inverse],
            "values": torch.cat([o["values"] for o in out["values"]])[inverse] if dispatch.use_critic else None,
            "scores": scores, "baselines": None, "overlong": overlong,
            "uids": [i for i in range(len(prompts)) for _ in range(cfg.rollout.n)], "prompts": rows,
            "new_rows": len(rows), "replayed": 0, "versions": versions,
            "timing": {
                "timing_s/gen": gen_s, "timing_s/wait_rollout": self.wait_rollout,
                "timing_s/snapshot": max((o["time_s"] for o in out["snapshot"]), default=0.0),
                **({"timing_s/old_log_prob": max(o["time_s"] for o in out["old"])} if old_pass else {}),
                "timing_s/ref": max(o["time_s"] for o in out["ref"]),
                "timing_s/reward": max(o["time_s"] for o in out["scores"]),
                **({"timing_s/values": max(o["time_s"] for o in out["values"])} if dispatch.use_critic else {}),
                "rollout/staleness/mean": float(lags.mean()), "rollout/staleness/max": float(lags.max()),
                **({"timing_s/weight_sync": self.sync_s} if self.separate else {}),
                **reward_metrics(out["scores"]),  # code_tests' reward/timeouts, reward/errors
            },
        }

    # --- after the step ------------------------------------------------------------------------

    def advance(self, index: int, version: int, consumed: int, window_start: float, step_s: float) -> dict[str, float]:
        """Step accepted: batch `index` is spent, the trainer holds `version`; the next batches'
        generation is queued behind the new weights. Returns the step's idle metrics over the
        wall-clock window from `window_start` (`time.time()`) that lasted `step_s` seconds."""
        self.flights.pop(index, None)
        self.version = version
        self._fill(consumed)
        end = window_start + step_s
        busy = sum(max(0.0, min(b, end) - max(a, window_start)) for a, b in self.busy)
        running = [s.submitted_at for segs in self.flights.values() for s in segs if s.calls]
        if running:  # a worker with queued work is busy from its last finish (or the submission) on
            since = max(min(running), max((b for _, b in self.busy), default=0.0))
            busy += max(0.0, end - max(since, window_start))
        busy = min(busy / max(1, len(self.group)), step_s)
        self.busy = [(a, b) for a, b in self.busy if b > window_start]
        wait_update = max(0.0, step_s - busy)
        return {"timing_s/wait_update": wait_update, "perf/rollout_idle_frac": wait_update / step_s,
                "perf/trainer_idle_frac": min(1.0, self.wait_rollout / step_s)}

    def rollback(self, version: int, consumed: int) -> None:
        """The weights went back to `version`: what was generated ahead is dropped and regenerated."""
        self.flights = {}
        self.version, self.pushed = version, None
        self.loads = []
        self._fill(consumed)

    # --- checkpoints ---------------------------------------------------------------------------

    def record(self, deadline: float, step: int) -> dict[str, Any]:
        """The batches in flight, gathered, as JSON (the loop state of a checkpoint)."""
        out: dict[str, Any] = {}
        for index, segments in sorted(self.flights.items()):
            rec = []
            for seg in segments:
                if seg.version is None:
                    rec.append({"rows": seg.rows, "target": seg.target})
                    continue
                self._gather(seg, deadline, step)
                b = seg.done["batch"]
                lengths = b["response_mask"].sum(-1).tolist()
                rec.append({"rows": seg.done["rows"], "target": seg.target, "version": seg.version,
                            "responses": [b["responses"][i, :n].tolist() for i, n in enumerate(lengths)],
                            "log_probs": [b["rollout_log_probs"][i, :n].tolist() for i, n in enumerate(lengths)],
                            "gen_s": seg.done["gen_s"]})
            out[str(index)] = rec
        return out

    def _restore(self, index: int, rec: dict[str, Any]) -> Segment:
        seg = Segment(list(rec["rows"]), int(rec["target"]))
        if "version" not in rec:
            return seg
        n = self.cfg.rollout.n
        prompts = self.prompts_of(index)
        batch = build_batch([prompts[r // n].prompt_ids for r in rec["rows"]], rec["responses"],
                            prompt_width=self.cfg.data.max_prompt_length,
                            response_width=self.cfg.data.max_response_length, pad_id=self.pad_id)
        width = self.cfg.data.max_response_length
        lp = torch.zeros(len(rec["rows"]), width, dtype=torch.float32)
        for i, row in enumerate(rec["log_probs"]):
            lp[i, :len(row)] = torch.tensor(row, dtype=torch.float32)
        batch["rollout_log_probs"] = lp
        # Sampled by weights this process never held: version 0 passes the actor's check (never newer).
        batch["policy_version"] = torch.zeros(len(rec["rows"]), 2, dtype=torch.float64)
        seg.version = int(rec["version"])
        seg.done = {"batch": batch, "rows": list(rec["rows"]), "gen_s": float(rec["gen_s"])}
        return seg


def check(cfg: PPOConfig, rollout_workers: int, *, num_workers: int) -> None:
    """What the job's resources must give a pipelined rollout (the API refuses the same at create
    time; the config's own rules are `engine.config.building`'s)."""
    r = cfg.rollout
    if not r.colocate and rollout_workers < 1:
        raise ConfigError("rollout.colocate false generates on workers of its own: set resources.rollout_workers "
                          "to at least 1", param="resources.rollout_workers")
    if not r.colocate and num_workers > 1 and cfg.actor.strategy == "fsdp2":
        raise ConfigError("separate rollout workers read the full weights: actor.strategy fsdp2 with several "
                          "workers needs rollout.colocate true", param="rollout.colocate")
