"""Job hyperparameters: nested dicts become frozen configs; bad keys, types and combinations are
refused with the dotted path of the offending field."""

import dataclasses

import pytest

from engine.config import METHOD_CONFIGS, PPOConfig, RMDistillConfig, SFTConfig, build_config, config_to_dict
from engine.errors import ConfigError


def test_defaults_follow_the_production_recipe():
    ppo = PPOConfig()
    assert (ppo.actor.ppo_mini_batch_size, ppo.actor.ppo_epochs, ppo.actor.clip_ratio) == (64, 4, 0.2)
    assert (ppo.actor.clip_ratio_c, ppo.actor.optim.lr, ppo.critic.optim.lr) == (3.0, 1e-6, 1e-5)
    assert (ppo.rollout.n, ppo.actor.ppo_max_token_len_per_gpu) == (5, 3072)
    assert (ppo.algorithm.gamma, ppo.algorithm.lam, ppo.algorithm.adv_estimator) == (1.0, 0.95, "gae")
    assert (ppo.algorithm.kl_ctrl.type, ppo.algorithm.kl_ctrl.target_kl) == ("adaptive", 0.1)
    assert (ppo.guardrails.warn_kl, ppo.guardrails.rollback_kl) == (0.2, 0.3)
    assert RMDistillConfig().gate_kl == 0.05 and RMDistillConfig().model.lora_rank == "auto"


def test_nested_dict_builds_frozen_config_and_round_trips():
    cfg = build_config(PPOConfig, {"actor": {"clip_ratio_c": 2.5, "optim": {"lr": 1e-5}},
                                   "algorithm": {"kl_ctrl": {"type": "fixed"}}, "data": {"train_batch_size": 128}})
    assert cfg.actor.clip_ratio_c == 2.5 and cfg.actor.optim.lr == 1e-5 and cfg.algorithm.kl_ctrl.type == "fixed"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.actor.clip_ratio_c = 4.0
    for name, cls in METHOD_CONFIGS.items():
        default = cls()
        assert build_config(cls, config_to_dict(default)) == default, name


@pytest.mark.parametrize(("data", "param"), [
    ({"actor": {"clip_ratio_cc": 3.0}}, "actor.clip_ratio_cc"),
    ({"actor": {"clip_ratio_c": 1.0}}, "actor.clip_ratio_c"),
    ({"actor": {"clip_ratio_c": "3"}}, "actor.clip_ratio_c"),
    ({"actor": {"ppo_epochs": True}}, "actor.ppo_epochs"),
    ({"actor": {"ppo_mini_batch_size": -1}}, "actor.ppo_mini_batch_size"),
    ({"actor": {"optim": {"lr": float("nan")}}}, "actor.optim.lr"),
    ({"actor": {"ppo_mini_batch_size": 128}}, "actor.ppo_mini_batch_size"),
    ({"algorithm": {"kl_ctrl": {"type": "pid"}}}, "algorithm.kl_ctrl.type"),
    ({"algorithm": {"adv_estimator": "grpo"}, "rollout": {"n": 1}}, "rollout.n"),
    ({"rollout": "hf"}, "rollout"),
])
def test_bad_hyperparameters_name_the_field(data, param):
    with pytest.raises(ConfigError) as info:
        build_config(PPOConfig, data)
    assert info.value.param == param and info.value.code == "invalid_config"


def test_supervised_micro_batch_cannot_exceed_batch():
    with pytest.raises(ConfigError) as info:
        build_config(SFTConfig, {"data": {"train_batch_size": 2}, "micro_batch_size_per_gpu": 4})
    assert info.value.param == "micro_batch_size_per_gpu"
