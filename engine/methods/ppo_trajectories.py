"""PPO on recorded trajectories (`rollout.source: trajectories`, docs/trajectories.md): the driver
loop of `engine.methods.ppo` with its rollout phase replaced. Nothing is generated and no reward
role runs: the job's training file is a snapshot of scored trajectories (one JSON row per
trajectory, written by the service when the job was created), cut into samples by
`engine.rollout.trajectories`; a step takes `data.train_batch_size` groups (the client's
`group_id`: a group estimator's baseline is its group's mean), all their samples. Each step's
batch carries the recorded log-probs as `rollout_log_probs` (the behaviour policy: what
`algorithm.rollout_correction` weights against and `rollout/logprob_diff/*` compares), the
trainer computes the old, reference and value passes as for generated samples, and the sample's
score is its trajectory's reward (shaped by `reward.overlong_buffer` like any score).

Steps: `trainer.total_training_steps`, or `trainer.total_epochs` passes over the groups, never
more than those passes (each epoch reshuffles the groups with `data.shuffle`).
"""

from __future__ import annotations

import json
from typing import Any

import torch

from engine.config import JobRequest, JobResult
from engine.data import PromptExample
from engine.errors import DataError
from engine.methods import ppo_experience as experience
from engine.methods.ppo import PPOTrainer, run_ppo
from engine.models import load_tokenizer
from engine.roles.batch import build_batch, select, shard_rows
from engine.rollout.trajectories import TrajectorySample, groups, load_samples
from engine.runtime.reporting import Reporter


def run_ppo_by_source(request: JobRequest, reporter: Reporter) -> JobResult:
    """A PPO job's entry point: `rollout.source` generate (`ppo.run_ppo`) or trajectories."""
    if request.config.rollout.source == "trajectories":
        return TrajectoryPPOTrainer(request, reporter).fit()
    return run_ppo(request, reporter)


class TrajectoryPPOTrainer(PPOTrainer):
    """`PPOTrainer` whose training batches are groups of recorded samples (see the module docstring)."""

    def _load_data(self) -> None:
        cfg, req = self.cfg, self.request
        tokenizer = load_tokenizer(self.artifacts.stage(req.model_path))
        self.tokenizer, self.pad_id = tokenizer, tokenizer.pad_token_id
        with open(self.artifacts.stage(req.training_file), encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        try:
            samples, self.dropped = load_samples(rows, prompt_width=cfg.data.max_prompt_length,
                                                 response_width=cfg.data.max_response_length)
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(f"the trajectories snapshot is malformed: {e}", param="training_file") from None
        self.train: list[Any] = groups(samples)  # the base loop's `_prompts` slices groups
        self.val: list[PromptExample] = []
        self.steps_per_epoch = len(self.train) // cfg.data.train_batch_size
        if self.steps_per_epoch == 0:
            raise DataError(f"{len(rows)} trajectories gave {len(samples)} samples in {len(self.train)} groups "
                            f"({self.dropped} dropped: longer than data.max_prompt_length / max_response_length), "
                            f"fewer than data.train_batch_size={cfg.data.train_batch_size} groups",
                            param="data.train_batch_size")
        passes = cfg.trainer.total_epochs * self.steps_per_epoch
        self.total_steps = min(cfg.trainer.total_training_steps or passes, passes)
        self.reporter.log(f"trajectories: {len(rows)} trajectories, {len(samples)} samples in {len(self.train)} "
                          f"groups, {self.dropped} dropped (too long for the job's widths)")

    def _reward_kwargs(self) -> dict[str, Any] | None:
        return None  # the posted rewards score the samples: no reward role

    def _rollout_phase(self, prompts: list[Any], deadline: float, *, batch_index: int,
                       snapshot: bool = True) -> dict[str, Any]:
        return collect(self, prompts, deadline)


def _prompt(tokenizer: Any, sample: TrajectorySample) -> PromptExample:
    """What the samples event and the loop read of a row's prompt."""
    return PromptExample(sample.prompt_ids, None, None, tokenizer.decode(sample.prompt_ids, skip_special_tokens=True))


def step_batch(samples: list[TrajectorySample], cfg: Any, pad_id: int) -> dict[str, torch.Tensor]:
    """The samples in `build_batch`'s layout, with their recorded log-probs as `rollout_log_probs`."""
    width = cfg.data.max_response_length
    batch = build_batch([s.prompt_ids for s in samples], [s.response_ids for s in samples],
                        prompt_width=cfg.data.max_prompt_length, response_width=width, pad_id=pad_id,
                        loss_masks=[s.loss_mask for s in samples])
    log_probs = torch.zeros(len(samples), width, dtype=torch.float32)
    for i, s in enumerate(samples):
        log_probs[i, :len(s.rollout_log_probs)] = torch.as_tensor(s.rollout_log_probs, dtype=torch.float32)
    batch["rollout_log_probs"] = log_probs
    return batch


def collect(trainer: TrajectoryPPOTrainer, step_groups: list[list[TrajectorySample]], deadline: float
            ) -> dict[str, Any]:
    """A step's rollout from recorded samples, in `ppo_rollout.collect`'s shape: the trained roles
    snapshot, then the old (unless on-policy), reference and value passes over the batch."""
    cfg, dispatch = trainer.cfg, trainer.dispatch
    roles, step = dispatch.roles, trainer.step + 1
    samples = [s for g in step_groups for s in g]
    batch = step_batch(samples, cfg, trainer.pad_id)
    trained = [roles["actor"]] + ([roles["critic"]] if dispatch.use_critic else [])
    refs: dict[str, list[Any]] = {"snapshot": [r for g in trained for r in g.submit_all("snapshot")],
                                  "old": [], "ref": [], "values": [], "idle": []}
    ref_role = roles["actor"] if dispatch.lora else roles["ref"]
    passes = ([] if dispatch.on_policy else [("old", roles["actor"], "compute_log_prob", "actor")])
    passes.append(("ref", ref_role, "compute_ref_log_prob", "actor" if dispatch.lora else "ref"))
    if dispatch.use_critic:
        passes.append(("values", roles["critic"], "compute_values", "critic"))
    shards, _ = shard_rows(len(samples), dispatch.num_mini_batches, dispatch.num_workers)
    for w, rows in enumerate(shards):
        if not rows:  # fsdp2 roles: still join each pass's collective unshard
            refs["idle"] += dispatch.idle(w, [name for *_, name in passes])
            continue
        part = select(batch, rows)
        for kind, group, method, _ in passes:
            refs[kind].append(group.submit(w, method, part))
    out = dispatch.gather(refs, deadline, "rollout", step)
    order = torch.tensor([r for rows in shards for r in rows])
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[order] = torch.arange(len(order))

    def joined(kind: str, key: str) -> torch.Tensor | None:
        return torch.cat([o[key] for o in out[kind]])[inverse] if out[kind] else None

    scores = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    scores, overlong = experience.shape_scores(scores, batch["response_mask"].sum(-1), cfg)
    sampled = batch["response_mask"].bool()
    return {
        "batch": batch, "old": joined("old", "log_probs"), "ref": joined("ref", "log_probs"),
        "values": joined("values", "values"), "scores": scores, "teacher": None, "baselines": None,
        "overlong": overlong, "uids": [i for i, g in enumerate(step_groups) for _ in g],
        "prompts": [_prompt(trainer.tokenizer, s) for s in samples], "new_rows": len(samples), "replayed": 0,
        "timing": {
            "timing_s/snapshot": max((o["time_s"] for o in out["snapshot"]), default=0.0),
            **{f"timing_s/{name}": max(o["time_s"] for o in out[kind])
               for kind, name in (("old", "old_log_prob"), ("ref", "ref"), ("values", "values")) if out[kind]},
            # What the step trained on, checkable against the recorded calls (docs/trajectories.md).
            "trajectories/samples": float(len(samples)),
            "trajectories/groups": float(len(step_groups)),
            "trajectories/dropped": float(trainer.dropped),
            "trajectories/sampled_tokens": float(sampled.sum()),
            "trajectories/sampled_token_id_sum": float(batch["responses"][sampled].sum()),
        },
    }
