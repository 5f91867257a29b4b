"""engine.guardrails: step verdicts, PF-PPO filtering, the replay buffer and the overfit gap."""

from __future__ import annotations

import math

import pytest
import torch

from engine.config import GuardrailConfig
from engine.guardrails import ReplayBuffer, judge_step, overfit_gap, reward_filter_mask


def test_judge_step():
    cfg = GuardrailConfig()
    assert judge_step(0.05, [], cfg).action == "ok"
    warn = judge_step(0.25, [], cfg)
    assert warn.action == "warn" and warn.evidence["kl"] == 0.25
    assert judge_step(0.35, [], cfg).action == "rollback"
    nan = judge_step(0.0, ["actor"], cfg)
    assert nan.action == "rollback" and nan.evidence["nonfinite"] == ["actor"]
    assert judge_step(math.nan, [], cfg).action == "rollback"


def test_reward_filter_drops_the_middle():
    scores = torch.tensor([0.5, 0.1, 0.9, 0.4, 0.6, 0.0, 1.0, 0.45])
    keep = reward_filter_mask(scores, 0.5)
    assert keep.sum() == 4
    kept = sorted(scores[keep].tolist())
    assert kept == pytest.approx([0.0, 0.1, 0.9, 1.0])  # the extremes stay
    assert reward_filter_mask(scores, 0.0).all()
    assert reward_filter_mask(torch.tensor([1.0, 2.0]), 0.9).all()  # the best and the worst always stay


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
