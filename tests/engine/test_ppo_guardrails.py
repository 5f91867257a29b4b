"""engine.guardrails: step verdicts, PF-PPO filtering, the replay buffer and the overfit gap."""

from __future__ import annotations

import math

import torch

from engine.config import GuardrailConfig
from engine.guardrails import ReplayBuffer, judge_step, overfit_gap


def test_judge_step():
    cfg = GuardrailConfig()
    assert judge_step(0.05, [], cfg).action == "ok"
    warn = judge_step(0.25, [], cfg)
    assert warn.action == "warn" and warn.evidence["kl"] == 0.25
    assert judge_step(0.35, [], cfg).action == "rollback"
    nan = judge_step(0.0, ["actor"], cfg)
    assert nan.action == "rollback" and nan.evidence["nonfinite"] == ["actor"]
    assert judge_step(math.nan, [], cfg).action == "rollback"


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
    assert overfit_gap(0.8, 0.78) == (0.8 - 0.78, False)
    gap, overfit = overfit_gap(0.9, 0.7)
    assert overfit and math.isclose(gap, 0.2)


def test_rollback_snapshot_reuses_its_buffers_and_restores_exactly():
    """The per-step snapshot copies into the previous snapshot's buffers, and a restore returns the
    weights, Adam state and LR schedule of the latest snapshot (repeatably)."""
    from engine.roles.base import TrainableRole

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
