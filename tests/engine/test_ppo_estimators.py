"""Critic-free advantage estimators, DAPO's dynamic sampling and overlong buffer, and the per-group
PF-PPO filter, run through `engine.methods.ppo` with the in-process executor (no Ray) on the demo assets."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_ppo import make_request

from engine.algos import group_has_signal
from engine.config import PPOConfig, Resources, build_config
from engine.errors import ConfigError
from engine.guardrails import reward_filter_mask
from engine.methods import ppo_experience as experience
from engine.methods.ppo import run_ppo
from engine.rewards.rules import register_reward, unregister_reward
from engine.runtime.reporting import RecordingReporter

pytestmark = pytest.mark.slow

ESTIMATORS = ["grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"]


def _local(request):
    return dataclasses.replace(request, resources=Resources(executor="local"))


@pytest.fixture
def reward_fn():
    """Register `fn` under a test name for one test; yields the registering function."""
    names = []

    def register(name, fn):
        register_reward(name)(fn)
        names.append(name)
        return {"function": name}

    yield register
    for name in names:
        unregister_reward(name)


def _critic_free(estimator: str, **extra) -> dict:
    return {"algorithm": {"adv_estimator": estimator, "use_kl_in_reward": False, **extra},
            "actor": {"use_kl_loss": True}}


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_each_estimator_trains_without_a_critic(estimator, demo_assets, tmp_path, monkeypatch, reward_fn):
    calls = []
    target = {"grpo": "compute_grpo_advantages", "rloo": "compute_rloo_advantages",
              "reinforce_plus_plus": "compute_reinforce_plus_plus_advantages",
              "reinforce_plus_plus_baseline": "compute_reinforce_plus_plus_baseline_advantages",
              "remax": "compute_remax_advantages"}[estimator]
    real = getattr(experience, target)
    monkeypatch.setattr(experience, target, lambda *a, **k: calls.append(a) or real(*a, **k))
    reward = reward_fn("test_first_token_parity", lambda response, truth, *, response_ids, **_:
                       float(response_ids[0] % 2) if response_ids else 0.0)
    reporter = RecordingReporter()
    run_ppo(_local(make_request(demo_assets, tmp_path, overrides=_critic_free(estimator), validation=False,
                                reward=reward)), reporter)
    assert reporter.steps() == [1, 2] and len(calls) == 2
    metrics = reporter.of("metrics")[-1]["values"]
    assert "critic/vf_loss" not in metrics and torch.isfinite(torch.tensor(metrics["actor/pg_loss"]))
    if estimator == "remax":  # the greedy baseline was generated and scored
        assert "timing_s/gen_baseline" in metrics and 0.0 <= metrics["critic/score_baseline/mean"] <= 1.0
        rewards, baselines, _ = calls[0]
        assert baselines.shape == (rewards.shape[0],)
    else:
        assert "critic/score_baseline/mean" not in metrics


@pytest.mark.parametrize("mini_batch", [4, 2])
def test_on_policy_steps_skip_the_old_log_prob_pass(mini_batch, demo_assets, tmp_path, monkeypatch):
    """One epoch in one mini-batch (4 prompts) without KL in the reward: the actor is never asked for
    old log-probs, the rollout KL comes from the update's forward; two mini-batches need the pass."""
    from engine.roles.actor import ActorRollout

    calls = []
    real = ActorRollout.compute_log_prob
    monkeypatch.setattr(ActorRollout, "compute_log_prob", lambda self, b: calls.append(1) or real(self, b))
    reporter = RecordingReporter()
    overrides = _critic_free("grpo")
    overrides["actor"]["ppo_mini_batch_size"] = mini_batch
    run_ppo(_local(make_request(demo_assets, tmp_path, overrides=overrides, validation=False)), reporter)
    metrics = reporter.of("metrics")[-1]["values"]
    assert reporter.steps() == [1, 2]
    assert torch.isfinite(torch.tensor([metrics["actor/reward_kl_penalty"], metrics["guardrails/kl"]])).all()
    if mini_batch == 4:
        assert calls == [] and "timing_s/old_log_prob" not in metrics
        assert metrics["actor/pg_clipfrac"] == 0.0  # ratio exactly 1: the old log-probs are the update's own
    else:
        assert len(calls) == 2 and "timing_s/old_log_prob" in metrics


def test_dynamic_sampling_fills_the_batch_with_informative_groups(demo_assets, tmp_path, monkeypatch, reward_fn):
    seen = []
    real = experience.advantages
    monkeypatch.setattr(experience, "advantages", lambda algo, rewards, mask, keep, rollout:
                        seen.append((rollout["scores"].clone(), list(rollout["uids"])))
                        or real(algo, rewards, mask, keep, rollout))
    # Half the prompts (odd numbers in the question) score every sample the same: no signal.
    def reward(response, truth, *, response_ids, prompt="", **_):
        if sum(map(ord, prompt)) % 2:
            return 1.0
        return float(response_ids[0] % 2) if response_ids else 0.0

    overrides = _critic_free("grpo", filter_groups={"enable": True, "max_num_gen_batches": 6})
    reporter = RecordingReporter()
    run_ppo(_local(make_request(demo_assets, tmp_path, overrides=merge_rollout_n(overrides, 4), validation=False,
                                reward=reward_fn("test_half_tied", reward))), reporter)
    metrics = [e["values"] for e in reporter.of("metrics")]
    assert all(m["train/num_gen_batches"] >= 1 for m in metrics)
    assert any(m["train/num_gen_batches"] > 1 for m in metrics)  # tied groups were replaced
    for scores, uids in seen:
        assert len(scores) == 4 * 4  # the batch keeps its size: 4 prompts x 4 samples
        if not reporter.of("warning"):
            assert group_has_signal(scores, uids).all()


def test_dynamic_sampling_gives_up_after_max_batches_and_warns(demo_assets, tmp_path, reward_fn):
    overrides = _critic_free("grpo", filter_groups={"enable": True, "max_num_gen_batches": 3})
    reporter = RecordingReporter()
    run_ppo(_local(make_request(demo_assets, tmp_path, overrides=overrides, validation=False,
                                reward=reward_fn("test_constant", lambda *a, **k: 1.0))), reporter)
    assert [e["values"]["train/num_gen_batches"] for e in reporter.of("metrics")] == [3.0, 3.0]
    assert [w["code"] for w in reporter.of("warning")] == ["filter_groups_short", "filter_groups_short"]


def test_overlong_buffer_penalises_long_responses(demo_assets, tmp_path, reward_fn):
    overrides = {"reward": {"overlong_buffer": {"enable": True, "len": 4, "penalty_factor": 2.0}}}
    reporter = RecordingReporter()
    run_ppo(_local(make_request(demo_assets, tmp_path, overrides=overrides, validation=False,
                                reward=reward_fn("test_zero", lambda *a, **k: 0.0))), reporter)
    for event in reporter.of("metrics"):
        values = event["values"]
        # max_response_length 8, buffer 4: a response of length L scores -(L - 4) / 4 * 2 (<= 0).
        assert values["critic/score/mean"] == pytest.approx(values["reward/overlong_penalty/mean"])
        assert values["critic/score/min"] >= -2.0
    assert any(e["values"]["critic/score/mean"] < 0 for e in reporter.of("metrics"))


def test_remax_baseline_is_shaped_like_the_samples(demo_assets, tmp_path, monkeypatch, reward_fn):
    """Greedy samples are the greedy baseline's own response: with DAPO's overlong penalty on, both
    are shaped the same, so each row's reward equals its baseline (the baseline had been left unshaped:
    every advantage was the penalty)."""
    calls = []
    real = experience.compute_remax_advantages
    monkeypatch.setattr(experience, "compute_remax_advantages", lambda *a, **k: calls.append(a) or real(*a, **k))
    overrides = {**_critic_free("remax"), "rollout": {"do_sample": False},
                 "reward": {"overlong_buffer": {"enable": True, "len": 7, "penalty_factor": 1.0}}}
    run_ppo(_local(make_request(demo_assets, tmp_path, overrides=overrides, validation=False, steps=1,
                                reward=reward_fn("test_zero", lambda *a, **k: 0.0))), RecordingReporter())
    rewards, baselines, _ = calls[0]
    # max_response_length 8 and a buffer of 7: a response of length L > 1 scores -(L - 1) / 7.
    assert (baselines < 0).any()
    torch.testing.assert_close(rewards.sum(-1), baselines, rtol=0.0, atol=1e-6)


def merge_rollout_n(overrides: dict, n: int) -> dict:
    return {**overrides, "rollout": {"n": n}}


def test_replay_needs_gae_and_filter_groups_needs_a_group_estimator():
    with pytest.raises(ConfigError) as err:
        build_config(PPOConfig, {"algorithm": {"adv_estimator": "grpo"}, "rollout": {"n": 2},
                                 "guardrails": {"reward_filter": {"enable": True, "replay_buffer_size": 4}}})
    assert err.value.param == "guardrails.reward_filter.replay_buffer_size"
    with pytest.raises(ConfigError) as err:
        build_config(PPOConfig, {"algorithm": {"adv_estimator": "remax", "filter_groups": {"enable": True}}})
    assert err.value.param == "algorithm.filter_groups.enable"
    with pytest.raises(ConfigError) as err:
        build_config(PPOConfig, {"algorithm": {"adv_estimator": "rloo"}, "rollout": {"n": 1}})
    assert err.value.param == "rollout.n"


# --- the per-group PF-PPO filter (no model needed) ---------------------------------------------------

def test_reward_filter_keeps_best_and_worst_of_each_group():
    scores = torch.tensor([0.1, 0.9, 0.5, 0.3, 2.0, 2.0, 2.0, 2.0, 0.0, 1.0])
    uids = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    keep = reward_filter_mask(scores, uids, "best_worst", torch.Generator().manual_seed(0))
    assert keep.tolist() == [True, True, False, False, True, True, True, True, True, True]


def test_reward_filter_breaks_ties_at_random_and_best_random_keeps_two():
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0])
    seen = set()
    for seed in range(30):
        keep = reward_filter_mask(scores, [0, 0, 0, 0], "best_worst", torch.Generator().manual_seed(seed))
        assert keep.sum() == 2 and keep[:2].sum() == 1 and keep[2:].sum() == 1
        seen.add(tuple(keep.tolist()))
    assert len(seen) == 4  # every tie-break happens
    others = set()
    for seed in range(30):
        keep = reward_filter_mask(torch.tensor([3.0, 1.0, 2.0, 0.0]), [5] * 4, "best_random",
                                  torch.Generator().manual_seed(seed))
        assert keep[0] and keep.sum() == 2
        others.add(int(keep[1:].nonzero()[0]) + 1)
    assert others == {1, 2, 3}
