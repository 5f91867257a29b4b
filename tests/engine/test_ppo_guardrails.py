"""engine.guardrails: step verdicts, PF-PPO filtering, the replay buffer, the overfit gap and collapse."""

from __future__ import annotations

import math

import torch

from engine.config import GuardrailConfig
from engine.guardrails import (
    ReplayBuffer,
    distinct_ratio,
    is_repeated_token,
    judge_collapse,
    judge_step,
    overfit_gap,
)


def test_judge_step():
    cfg = GuardrailConfig()
    assert judge_step(0.05, [], cfg, step_kl=0.05).action == "ok"
    warn = judge_step(0.25, [], cfg, step_kl=0.01)
    assert warn.action == "warn" and warn.evidence["kl"] == 0.25 and warn.evidence["step_kl"] == 0.01
    assert judge_step(0.35, [], cfg, step_kl=0.35).action == "rollback"
    nan = judge_step(0.0, ["actor"], cfg, step_kl=0.0)
    assert nan.action == "rollback" and nan.evidence["nonfinite"] == ["actor"]
    assert judge_step(math.nan, [], cfg, step_kl=0.0).action == "rollback"
    assert judge_step(0.0, [], cfg, step_kl=math.nan).action == "rollback"


def test_judge_step_rolls_back_what_the_step_did_not_the_drift():
    """A run that learns drifts from the reference step by step: past `rollback_kl` a rollback to
    the start of the step (already there) could only trip again, until `Diverged` (GRPO at lr 1e-3
    on the demo, issue 28). The drift warns; the rollback judges the step's own KL."""
    cfg = GuardrailConfig()
    drifted = judge_step(0.31, [], cfg, step_kl=0.01)
    assert drifted.action == "warn" and "0.3100" in drifted.reason
    jump = judge_step(0.31, [], cfg, step_kl=0.31)
    assert jump.action == "rollback" and "step KL 0.3100" in jump.reason


def test_replay_buffer_keeps_the_newest_and_replays_once():
    buffer = ReplayBuffer(2)
    buffer.push([{"i": 1}, {"i": 2}, {"i": 3}])
    state = buffer.state_dict()
    assert [r["i"] for r in buffer.take()] == [2, 3]
    assert buffer.take() == []
    buffer.load_state_dict(state)
    assert len(buffer.rows) == 2
    off = ReplayBuffer(0)
    off.push([{"i": 1}])
    assert off.take() == []


def test_overfit_gap():
    assert overfit_gap(0.8, 0.78) == (0.8 - 0.78, 0.05, False)
    gap, margin, overfit = overfit_gap(0.9, 0.7)
    assert overfit and math.isclose(gap, 0.2) and margin == 0.05


def test_overfit_gap_reads_the_gap_on_the_rewards_scale():
    """The demo run's numbers (reward-model scores, training samples spread ~1): validation 0.2
    below training is noise, not overfitting (the fixed 0.05 margin warned on every run); a gap of
    two spreads still is."""
    gap, margin, overfit = overfit_gap(2.1, 1.9, spread=1.0)
    assert not overfit and margin == 0.5 and math.isclose(gap, 0.2)
    assert overfit_gap(3.0, 1.0, spread=1.0)[2]
    # rewards in [0, 1] that all tie (spread 0): the recipe's 0.05 gate
    assert overfit_gap(1.0, 0.9, spread=0.0)[2] and not overfit_gap(1.0, 0.96, spread=0.0)[2]


def test_collapse_verdicts():
    eos = [2]
    collapsed = [[7, 7, 7, 7, 7, 2]] * 4  # one repeated token, the same for every prompt
    healthy = [[5, 6, 2], [9, 4, 8, 2], [3, 2], [11, 12, 2]]
    off = GuardrailConfig()
    assert judge_collapse(0.01, collapsed, off, eos).action == "ok"  # off by default
    assert distinct_ratio(collapsed) == 0.25 and distinct_ratio(healthy) == 1.0 and distinct_ratio([]) == 1.0
    assert is_repeated_token([7, 7, 7, 7, 2], eos) and not is_repeated_token([7, 7, 7, 2], eos)
    cfg = GuardrailConfig(min_distinct_ratio=0.5, min_entropy=0.1)
    verdict = judge_collapse(1.0, collapsed, cfg, eos)
    assert verdict.action == "warn" and "distinct" in verdict.reason
    assert verdict.evidence["sample_rows"] == [0, 1, 2] and verdict.evidence["repeated_token_responses"] == 4
    assert judge_collapse(1.0, healthy, cfg, eos).action == "ok"
    low = judge_collapse(0.05, None, cfg, eos)  # no validation this step: entropy alone
    assert low.action == "warn" and "entropy" in low.reason and "sample_rows" not in low.evidence
    assert judge_collapse(0.05, None, GuardrailConfig(min_entropy=0.1, collapse_action="rollback")).action == "rollback"


def test_rollback_snapshot_reuses_its_buffers_and_restores_exactly():
    """The per-step snapshot copies into the previous snapshot's buffers, and a restore returns the
    weights, Adam state and LR schedule of the latest snapshot (repeatably)."""
    from engine.roles.trainable import TrainableRole

    class Tiny(TrainableRole):
        def __init__(self) -> None:
            super().__init__(seed=0)
            self.model = torch.nn.Linear(4, 3)
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: 1.0 / (1 + s))
            self._init_grads()

        def train_step(self) -> None:
            self.model(torch.randn(5, 4)).pow(2).sum().backward()
            self._optimizer_step(1.0)
            self.scheduler.step()

    def state(role):
        opt = role.optimizer.state_dict()
        return ({k: v.clone() for k, v in role.model.state_dict().items()},
                {i: {k: v.clone() for k, v in s.items()} for i, s in opt["state"].items()},
                role.current_lr())

    role = Tiny()
    role.snapshot()  # before any step: Adam has no state yet
    role.train_step()
    role.snapshot()
    buffers = {k: v.data_ptr() for k, v in role._snapshot["tensors"].items()}
    role.train_step()
    role.snapshot()
    assert {k: v.data_ptr() for k, v in role._snapshot["tensors"].items()} == buffers  # reused, not reallocated
    saved = state(role)
    for _ in range(2):
        role.train_step()
        role.restore()
        weights, opt, lr = state(role)
        assert lr == saved[2]
        for k in saved[0]:
            assert torch.equal(weights[k], saved[0][k])
        for i in saved[1]:
            for k in saved[1][i]:
                assert torch.equal(opt[i][k], saved[1][i][k])
        live = [t.data_ptr() for s in role.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
        snap = [t.data_ptr() for s in role._snapshot["optimizer"]["state"].values() for t in s.values()]
        assert not set(live) & set(snap)  # the optimizer never holds the snapshot's buffers
