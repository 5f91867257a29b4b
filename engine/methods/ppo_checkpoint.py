"""The PPO driver's checkpoints: a step directory written whole (atomically, or part by part with the
step's marker last on a remote store) with each trained role's part and the loop state, and the
invariants a resume checks before it continues from one.
"""

from __future__ import annotations

import re
import time
from typing import Any

from engine.config import PPOConfig
from engine.methods.ppo_dispatch import RoleDispatch
from engine.runtime.artifacts import Artifacts, is_remote, join
from engine.runtime.checkpoint import CheckpointError, atomic_dir, step_dir
from engine.runtime.reporting import Reporter


def save(dispatch: RoleDispatch, artifacts: Artifacts, reporter: Reporter, checkpoint_dir: str, step: int,
         state: dict[str, Any], metrics: dict[str, float], deadline: float, *, gather_step: int) -> None:
    """Checkpoint `step` under `checkpoint_dir`: the actor's part carries the loop `state`; the
    checkpoint is reported with `metrics`. `gather_step` names the step a timeout is charged to."""
    start = time.perf_counter()
    final = step_dir(checkpoint_dir, step)
    parts = ("actor", "critic") if dispatch.use_critic else ("actor",)

    def save_parts(root: str) -> None:
        refs = dispatch.submit_rank0("actor", "save_checkpoint", join(root, "actor"), {"trainer": state})
        if dispatch.use_critic:
            refs += dispatch.submit_rank0("critic", "save_checkpoint", join(root, "critic"))
        dispatch.gather({"save": refs}, deadline, "checkpoint", gather_step)
        for role in parts:
            # Each role's part is a complete checkpoint of its own (`load_state` checks the marker).
            artifacts.put_marker(join(root, role))

    if is_remote(final):
        # Each role uploads its part from its own node; the step's marker goes last.
        artifacts.remove(final)
        save_parts(final)
        artifacts.put_marker(final)
    else:
        with atomic_dir(final) as tmp:  # the step directory appears only when the whole of it is complete
            save_parts(tmp)
    reporter.checkpoint(step, final, {**metrics, "timing_s/save_checkpoint": time.perf_counter() - start})


def check_resumed(dispatch: RoleDispatch, cfg: PPOConfig, path: str, state: dict[str, Any], *, step: int,
                  consumed: int) -> int:
    """The resume invariants: the loop continues at the step the checkpoint is named for, with
    the data position its steps consumed and the optimizer where its updates left it. A
    checkpoint whose recorded state disagrees would skip or repeat data silently: it fails.
    Returns the actor's scheduler position."""
    problems = []
    named = re.search(r"step_(\d+)/*$", str(path))
    if named and int(named.group(1)) != step:
        problems.append(f"the checkpoint is step {named.group(1)} but records step {step}")
    gen_batches = cfg.algorithm.filter_groups.enable  # dynamic sampling may read more batches
    if consumed < step or (not gen_batches and consumed != step):
        problems.append(f"data position {consumed} does not follow from {step} steps")
    updates = dispatch.gather({"pos": dispatch.roles["actor"].submit_all("optimizer_position")},
                              time.perf_counter() + 60, "resume", step + 1)["pos"]
    expected = int(state.get("actor_updates", max(0, step - cfg.trainer.critic_warmup)))
    if any(u != expected for u in updates):
        problems.append(f"the actor's optimizer schedule is at {updates[0]} updates, {expected} recorded")
    if problems:
        raise CheckpointError(f"cannot resume from {path}: " + "; ".join(problems), param="resume_from",
                              data={"step": step, "consumed": consumed, "actor_updates": updates[0],
                                    "expected_actor_updates": expected})
    return expected
