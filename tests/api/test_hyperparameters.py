"""The API's hyperparameter schemas mirror engine/config/ (names, nesting, defaults) and agree with the
engine's own checks; VERL-style overrides map onto them. Tests may import the engine; the API may not."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from api.schemas import hyperparameters as H
from engine import config as E
from engine.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _shape(cls) -> dict:
    """Field name -> nested shape (for dataclasses / models) or None, recursively."""
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        return {f.name: _shape(hints[f.name]) if dataclasses.is_dataclass(hints[f.name]) else None
                for f in dataclasses.fields(cls)}
    return {name: _shape(f.annotation) if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
            else None for name, f in cls.model_fields.items()}


@pytest.mark.parametrize("method", sorted(E.METHOD_CONFIGS))
def test_schemas_mirror_the_engine_dataclasses(method):
    engine_cls, api_cls = E.METHOD_CONFIGS[method], H.METHOD_HYPERPARAMETERS[method]
    assert _shape(api_cls) == _shape(engine_cls)  # same names and nesting, same order
    # Same defaults, at every level (including context defaults such as the actor's lr=1e-6).
    assert api_cls().model_dump(mode="json") == E.config_to_dict(engine_cls())
    # What the API stores, the engine builds, and back: nothing lost or renamed.
    assert E.config_to_dict(E.build_config(engine_cls, api_cls().model_dump(mode="json"))) == \
        api_cls().model_dump(mode="json")


def test_resources_mirror_the_engine():
    assert _shape(H.Resources) == _shape(E.Resources)
    # Same defaults but `cpus_per_worker`: `auto` in a request, which the API resolves to a number at
    # creation (tests/api/test_auto_cpus.py); the engine never sees `auto`.
    api, engine = H.Resources().model_dump(), E.config_to_dict(E.Resources())
    assert (api.pop("cpus_per_worker"), engine.pop("cpus_per_worker")) == ("auto", 1.0)
    assert api == engine
    assert H.JobResources().model_dump() == E.config_to_dict(E.Resources())  # what a job holds


def test_local_executor_runs_one_worker():
    assert H.Resources(executor="local").executor == "local"
    with pytest.raises(ValidationError) as err:
        H.Resources(executor="local", num_workers=2)
    assert err.value.errors()[0]["loc"] == ("num_workers",)


# Inputs the engine refuses: the API refuses them too, at the same dotted path.
ENGINE_REFUSES = [
    ("ppo", {"actor": {"clip_ratio_c": 1.0}}),
    ("ppo", {"actor": {"clip_ratio": 1.0}}),
    ("ppo", {"actor": {"clip_ratio_low": 0.0}}),
    ("ppo", {"actor": {"ppo_mini_batch_size": 65}}),
    ("ppo", {"algorithm": {"adv_estimator": "grpo"}, "rollout": {"n": 1}}),
    ("ppo", {"actor": {"optim": {"lr": 0.0}}}),
    ("ppo", {"rollout": {"n": 0}}),
    ("ppo", {"trainer": {"total_training_steps": 0}}),
    ("ppo", {"critic": {"ppo_max_token_len_per_gpu": -1}}),
    ("ppo", {"actor": {"kl_loss_type": "l2"}}),
    ("ppo", {"actor": {"ppo_epochs": 2.0}}),
    ("ppo", {"actor": {"use_kl_loss": 1}}),
    ("ppo", {"algorithm": {"kl_ctrl": {"target": 0.1}}}),
    ("ppo", {"guardrails": {"max_rollbacks": -1}}),
    ("ppo", {"rollout": {"gpu_memory_utilization": 0.0}}),
    ("sft", {"micro_batch_size_per_gpu": 128}),
    ("sft", {"data": {"max_prompt_length": 0}}),
    ("reward_model", {"optim": {"betas": [0.9]}}),
    ("rm_distill", {"loss": "huber"}),
    ("rm_distill", {"model": {"lora_rank": -1}}),
    ("sft", {"model": {"strategy": "fsdp2", "lora_rank": 4}}),
    ("sft", {"model": {"fsdp_config": {"param_offload": True}}}),
    ("ppo", {"model": {"strategy": "fsdp2"}}),
    ("ppo", {"model": {"lora_rank": 8}, "critic": {"strategy": "fsdp2"}}),
    ("ppo", {"actor": {"fsdp_config": {"optimizer_offload": True}}}),
]


@pytest.mark.parametrize(("method", "data"), ENGINE_REFUSES, ids=[str(d) for _, d in ENGINE_REFUSES])
def test_what_the_engine_refuses_the_api_refuses_at_the_same_path(method, data):
    with pytest.raises(ConfigError) as engine_error:
        E.build_config(E.METHOD_CONFIGS[method], data)
    with pytest.raises(ValidationError) as api_error:
        H.METHOD_HYPERPARAMETERS[method].model_validate(data)
    api_param = ".".join(str(p) for p in api_error.value.errors()[0]["loc"])
    assert api_param.startswith(engine_error.value.param), (api_param, engine_error.value.param)


@pytest.mark.parametrize(("method", "data", "param"), [
    ("ppo", {"data": {"train_batch_size": 10**6 + 1}}, "data.train_batch_size"),
    ("ppo", {"data": {"max_response_length": 10**7}}, "data.max_response_length"),
    ("ppo", {"actor": {"ppo_max_token_len_per_gpu": 10**9}}, "actor.ppo_max_token_len_per_gpu"),
    ("ppo", {"algorithm": {"gamma": float("nan")}}, "algorithm.gamma"),
    ("ppo", {"actor": {"entropy_coeff": float("inf")}}, "actor.entropy_coeff"),
    ("ppo", {"actor": {"ppo_micro_batch_size_per_gpu": 321}, "data": {"train_batch_size": 64},
             "rollout": {"n": 5}}, "actor.ppo_micro_batch_size_per_gpu"),
    ("ppo", {"trainer": {"save_freq": 0}}, "trainer.save_freq"),
    ("ppo", {"model": {"target_modules": []}}, None),
    ("sft", {"trainer": {"total_epochs": 10**5}}, "trainer.total_epochs"),
])
def test_the_api_is_stricter_than_the_engine_about_absurd_values(method, data, param):
    if param is None:  # an empty module list is fine for both
        H.METHOD_HYPERPARAMETERS[method].model_validate(data)
        return
    with pytest.raises(ValidationError) as err:
        H.METHOD_HYPERPARAMETERS[method].model_validate(data)
    assert ".".join(str(p) for p in err.value.errors()[0]["loc"]) == param


def test_partial_sections_keep_context_defaults():
    rmd = H.RMDistillConfig.model_validate({"optim": {"weight_decay": 0.1}, "model": {"dtype": "bfloat16"}})
    assert rmd.optim.lr == 1e-4 and rmd.model.lora_rank == "auto"
    ppo = H.PPOConfig.model_validate({"actor": {"optim": {"weight_decay": 0.1}}, "trainer": {"save_freq": 5}})
    assert ppo.actor.optim.lr == 1e-6 and ppo.trainer.total_epochs == 3


@pytest.mark.parametrize(("text", "value"), [
    ("4", 4), ("1e-4", 1e-4), ("0.5", 0.5), ("true", True), ("True", True), ("false", False), ("null", None),
    ("~", None), ("", None), ("fsdp2", "fsdp2"), ('"4"', "4"), ("[0.9, 0.95]", [0.9, 0.95]),
    ("[q_proj, v_proj]", ["q_proj", "v_proj"]), ("token-mean", "token-mean"), ("a: b: c", "a: b: c"),
])
def test_override_values_parse_as_json_or_yaml_scalars(text, value):
    assert H.parse_value(text) == value


def test_override_keys_drop_verls_actor_rollout_ref_prefix():
    assert H.map_key("actor_rollout_ref.actor.ppo_epochs") == ["actor", "ppo_epochs"]
    assert H.map_key("actor_rollout_ref.model.lora_rank") == ["model", "lora_rank"]
    assert H.map_key("actor_rollout_ref.rollout.n") == ["rollout", "n"]
    assert H.map_key("+algorithm.kl_ctrl.kl_coef") == ["algorithm", "kl_ctrl", "kl_coef"]
    merged = H.apply_overrides({"actor": {"ppo_epochs": 2, "clip_ratio": 0.1}},
                               ["actor_rollout_ref.actor.ppo_epochs=4", "data.train_batch_size=128"])
    assert merged == {"actor": {"ppo_epochs": 4, "clip_ratio": 0.1}, "data": {"train_batch_size": 128}}
    ppo = H.PPOConfig.model_validate(merged)
    assert ppo.actor.ppo_epochs == 4 and ppo.data.train_batch_size == 128


def test_the_api_package_does_not_import_the_engine():
    code = ("import sys, api.main; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'engine', 'torch', 'ray', 'transformers'}))")
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
