"""Interactive trainer payload checks (`engine.interactive.datums`): every bad input names its
`param`, and the checks load neither torch nor Ray."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import ConfigError, DataError
from engine.interactive import validate_payload
from engine.interactive.datums import parse

ROOT = Path(__file__).resolve().parents[2]


def datum(n=4, **inputs):
    base = {"target_tokens": [1] * n, "weights": [1.0] * n}
    base.update(inputs)
    return {"model_input": [3] * n, "loss_fn_inputs": {k: v for k, v in base.items() if v is not None}}


def fb(data, loss_fn="cross_entropy", **extra):
    return {"data": data, "loss_fn": loss_fn, **extra}


def is_datum(n=4):
    return datum(n, weights=None, logprobs=[-1.0] * n, advantages=[0.5] * n)


BAD = [
    # (op, payload, error class, param)
    ("nope", {}, ConfigError, "op"),
    ("forward", [], ConfigError, "payload"),
    ("forward_backward", fb([]), DataError, "data"),
    ("forward_backward", fb(None), DataError, "data"),
    ("forward_backward", fb([datum()], loss_fn="mse"), ConfigError, "loss_fn"),
    ("forward_backward", {"data": [datum()]}, ConfigError, "loss_fn"),
    ("forward_backward", fb([datum()], extra=1), ConfigError, "extra"),
    ("forward_backward", fb([datum(), "x"]), DataError, "data[1]"),
    ("forward_backward", fb([datum(), {"model_input": [], "loss_fn_inputs": {}}]), DataError, "data[1].model_input"),
    ("forward_backward", fb([datum(), {"model_input": [1, True], "loss_fn_inputs": {}}]), DataError,
     "data[1].model_input"),
    ("forward_backward", fb([datum(), {"model_input": [1, -1], "loss_fn_inputs": {}}]), DataError,
     "data[1].model_input"),
    ("forward_backward", fb([datum(), datum(), datum(weights=[1.0, 1.0])]), DataError,
     "data[2].loss_fn_inputs.weights"),
    ("forward_backward", fb([datum(weights=[1.0, float("nan"), 1.0, 1.0])]), DataError,
     "data[0].loss_fn_inputs.weights"),
    ("forward_backward", fb([datum(target_tokens=[1, 2])]), DataError, "data[0].loss_fn_inputs.target_tokens"),
    ("forward_backward", fb([datum(weights=None)]), DataError, "data[0].loss_fn_inputs.weights"),
    ("forward_backward", fb([datum(advantages=[1.0] * 4)]), DataError, "data[0].loss_fn_inputs.advantages"),
    ("forward_backward", fb([datum()], loss_fn="importance_sampling"), DataError, "data[0].loss_fn_inputs.weights"),
    ("forward_backward", fb([is_datum(), datum(weights=None, logprobs=[0.0] * 4)], loss_fn="importance_sampling"),
     DataError, "data[1].loss_fn_inputs.advantages"),
    ("forward_backward", fb([is_datum(), is_datum(3) | {"model_input": [3] * 4}], loss_fn="ppo"), DataError,
     "data[1].loss_fn_inputs.target_tokens"),
    ("forward_backward", fb([datum(), datum(), datum()], loss_fn="dpo"), DataError, "data"),
    ("forward_backward", fb([datum(ref_logprobs=[0.0] * 4), datum()], loss_fn="dpo"), DataError,
     "data[1].loss_fn_inputs.ref_logprobs"),
    ("forward_backward", fb([datum(), {"model_input": [1], "loss_fn_inputs": {}, "x": 1}]), DataError, "data[1].x"),
    ("forward_backward", fb([is_datum()], loss_fn="ppo", loss_fn_config={"clip_low_threshold": -0.1}),
     ConfigError, "loss_fn_config.clip_low_threshold"),
    ("forward_backward", fb([is_datum()], loss_fn="ppo", loss_fn_config={"clip_ratio_c": 3.0}), ConfigError,
     "loss_fn_config.clip_ratio_c"),  # VERL's dual clip: not Tinker's ppo
    ("forward_backward", fb([is_datum()], loss_fn="cispo", loss_fn_config={"clip_high_threshold": 0.5,
                                                                           "clip_low_threshold": 0.9}),
     ConfigError, "loss_fn_config.clip_high_threshold"),
    ("forward_backward", fb([is_datum()], loss_fn="dro", loss_fn_config={"beta": 0}), ConfigError,
     "loss_fn_config.beta"),
    ("forward_backward", fb([datum(), datum()], loss_fn="dpo", loss_fn_config={"beta": 0}), ConfigError,
     "loss_fn_config.beta"),
    ("forward_backward", fb([datum()], loss_fn_config={"beta": 0.1}), ConfigError, "loss_fn_config.beta"),
    ("optim_step", {"adam_params": {"learning_rate": -1e-3}}, ConfigError, "adam_params.learning_rate"),
    ("optim_step", {"adam_params": {"learning_rate": "fast"}}, ConfigError, "adam_params.learning_rate"),
    ("optim_step", {"adam_params": {"beta1": 1.0}}, ConfigError, "adam_params.beta1"),
    ("optim_step", {"adam_params": {"beta2": -0.5}}, ConfigError, "adam_params.beta2"),
    ("optim_step", {"adam_params": {"eps": 0}}, ConfigError, "adam_params.eps"),
    ("optim_step", {"adam_params": {"weight_decay": -1}}, ConfigError, "adam_params.weight_decay"),
    ("optim_step", {"adam_params": {"grad_clip_norm": float("inf")}}, ConfigError, "adam_params.grad_clip_norm"),
    ("optim_step", {"adam_params": {"momentum": 0.9}}, ConfigError, "adam_params.momentum"),
    ("sample", {"prompts": []}, DataError, "prompts"),
    ("sample", {"prompts": ["hi", ""]}, DataError, "prompts[1]"),
    ("sample", {"prompts": [[1, 2], [1.5]]}, DataError, "prompts[1]"),
    ("sample", {"prompts": ["hi"], "sampling_params": {"max_tokens": 0}}, ConfigError, "sampling_params.max_tokens"),
    ("sample", {"prompts": ["hi"], "sampling_params": {"temperature": -1}}, ConfigError,
     "sampling_params.temperature"),
    ("sample", {"prompts": ["hi"], "sampling_params": {"top_p": 0}}, ConfigError, "sampling_params.top_p"),
    ("sample", {"prompts": ["hi"], "sampling_params": {"top_k": 2.5}}, ConfigError, "sampling_params.top_k"),
    ("sample", {"prompts": ["hi"], "sampling_params": {"stop": [""]}}, ConfigError, "sampling_params.stop"),
    ("sample", {"prompts": ["hi"], "sampling_params": {"seed": "x"}}, ConfigError, "sampling_params.seed"),
    ("sample", {"prompts": ["hi"], "num_samples": 0}, ConfigError, "num_samples"),
    ("sample", {"prompts": ["hi"] * 100, "num_samples": 100}, ConfigError, "num_samples"),
    ("sample", {"prompts": ["hi"], "sampler_path": ""}, ConfigError, "sampler_path"),
    ("save_state", {"name": "../x"}, ConfigError, "name"),
    ("save_state", {"name": ".hidden"}, ConfigError, "name"),
    ("save_weights_for_sampler", {}, ConfigError, "name"),
    ("load_state", {"path": ""}, ConfigError, "path"),
    ("load_state", {"path": "/x", "optimizer": "yes"}, ConfigError, "optimizer"),
]


@pytest.mark.parametrize(("op", "payload", "error", "param"), BAD, ids=[f"{b[0]}-{b[3]}-{i}" for i, b in enumerate(BAD)])
def test_bad_payloads_name_their_param(op, payload, error, param):
    with pytest.raises(error) as info:
        validate_payload(op, payload)
    assert info.value.param == param, info.value.message
    assert info.value.user_error
    assert info.value.code == ("invalid_data" if error is DataError else "invalid_config")


def test_vocabulary_and_length_are_checked_when_known():
    payload = fb([datum(), datum(target_tokens=[1, 2, 99, 1])])
    validate_payload("forward_backward", payload)
    with pytest.raises(DataError) as info:
        validate_payload("forward_backward", payload, vocab_size=99)
    assert info.value.param == "data[1].loss_fn_inputs.target_tokens" and info.value.data == {"index": 2}
    with pytest.raises(DataError) as info:
        validate_payload("forward_backward", fb([datum(8)]), vocab_size=100, max_length=7)
    assert info.value.param == "data[0].model_input"
    sample = {"prompts": [[1] * 5], "sampling_params": {"max_tokens": 3}}
    validate_payload("sample", sample, vocab_size=10, max_length=8)
    with pytest.raises(ConfigError) as info:
        validate_payload("sample", sample, vocab_size=10, max_length=7)
    assert info.value.param == "sampling_params.max_tokens"
    with pytest.raises(ConfigError) as info:
        validate_payload("sample", {"prompts": ["x"], "sampling_params": {"stop": [10]}}, vocab_size=10)
    assert info.value.param == "sampling_params.stop"


def test_defaults_are_filled_in():
    adam = parse("optim_step", {})
    assert adam == {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0,
                    "grad_clip_norm": 0.0}
    request = parse("sample", {"prompts": ["x"], "sampling_params": {"stop": "\n", "top_k": -1}})
    assert (request.max_tokens, request.temperature, request.top_p, request.top_k, request.num_samples) == (
        16, 1.0, 1.0, 0, 1)
    assert request.stop_strings == ["\n"] and request.stop_tokens == [] and request.seed is None
    forward = parse("forward", fb([is_datum(), is_datum()], loss_fn="ppo"))
    assert forward.config == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2} and forward.tokens == 8
    assert parse("forward", fb([is_datum()], loss_fn="cispo")).config == {"clip_low_threshold": 0.0,
                                                                         "clip_high_threshold": 4.0}
    assert parse("forward", fb([is_datum()], loss_fn="dro")).config == {"beta": 0.05}
    assert parse("load_state", {"path": "/x"}) == ("/x", True)


def test_the_checks_import_neither_torch_nor_ray():
    code = ("import sys; import engine.interactive as i; i.validate_payload('optim_step', {}); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ray', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.strip() == "[]"
