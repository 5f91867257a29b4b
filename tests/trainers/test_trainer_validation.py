"""The API's checks of a primitive (pydantic, before anything is queued) and the engine's
(`engine.interactive.validate_payload`, before anything changes) agree: what the API accepts, stored as
it stores it, the engine accepts; what the API refuses, the engine refuses at the same `param`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.errors import _loc_to_param
from api.schemas.trainers import (
    ForwardBackwardRequest,
    LoadStateRequest,
    OptimStepRequest,
    SampleRequest,
    SaveRequest,
)
from engine.errors import EngineError
from engine.interactive import validate_payload
from workers.trainers import _param

SCHEMAS = {"forward_backward": ForwardBackwardRequest, "forward": ForwardBackwardRequest, "optim_step": OptimStepRequest,
           "sample": SampleRequest, "save_state": SaveRequest, "save_weights_for_sampler": SaveRequest,
           "load_state": LoadStateRequest}
CE = {"model_input": [1, 2, 3], "loss_fn_inputs": {"target_tokens": [2, 3, 4], "weights": [0.0, 1.0, 1.0]}}
RL = {"model_input": [1, 2], "loss_fn_inputs": {"target_tokens": [2, 3], "logprobs": [0.0, -1.0],
                                                 "advantages": [0.0, 0.5]}}

GOOD = [
    ("forward_backward", {"data": [CE]}),
    ("forward", {"data": [CE, CE], "loss_fn": "dpo", "loss_fn_config": {"beta": 0.2}}),
    ("forward_backward", {"data": [RL], "loss_fn": "importance_sampling"}),
    ("forward_backward", {"data": [RL], "loss_fn": "ppo",
                          "loss_fn_config": {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}}),
    ("forward_backward", {"data": [RL], "loss_fn": "cispo", "loss_fn_config": {"clip_high_threshold": 2.0}}),
    ("forward_backward", {"data": [RL], "loss_fn": "dro", "loss_fn_config": {"beta": 0.1}}),
    ("optim_step", {}),
    ("optim_step", {"adam_params": {"learning_rate": 0.5, "beta2": 0.999, "grad_clip_norm": 1.0}}),
    ("sample", {"prompts": [[1, 2], "text"], "num_samples": 3}),
    ("sample", {"prompts": [[1]], "sampling_params": {"temperature": 0, "stop": ["\n", 7], "seed": 4, "top_k": 5}}),
    ("save_state", {"name": "step-10"}),
    ("save_weights_for_sampler", {"name": "a.b_c"}),
    ("load_state", {"path": "model-01abc", "optimizer": False}),
]

BAD = [
    ("forward_backward", {"data": []}, "data"),
    ("forward_backward", {"data": [{**CE, "loss_fn_inputs": {"target_tokens": [2, 3, 4]}}]},
     "data.0.loss_fn_inputs.weights"),
    ("forward_backward", {"data": [CE, {**CE, "loss_fn_inputs": {**CE["loss_fn_inputs"], "weights": [1.0]}}]},
     "data.1.loss_fn_inputs.weights"),
    ("forward_backward", {"data": [RL], "loss_fn": "ppo", "loss_fn_config": {"beta": 0.1}}, "loss_fn_config.beta"),
    ("forward_backward", {"data": [RL], "loss_fn": "ppo", "loss_fn_config": {"clip_low": 0.2}},
     "loss_fn_config.clip_low"),
    ("forward_backward", {"data": [RL], "loss_fn": "ppo",
                          "loss_fn_config": {"clip_low_threshold": 1.1, "clip_high_threshold": 1.0}},
     "loss_fn_config.clip_high_threshold"),
    ("forward_backward", {"data": [{**CE, "loss_fn_inputs": {"target_tokens": [2, 3, 4]}}],
                          "loss_fn": "importance_sampling"}, "data.0.loss_fn_inputs.logprobs"),
    ("forward_backward", {"data": [{**RL, "loss_fn_inputs": {**RL["loss_fn_inputs"], "weights": [1.0, 1.0]}}],
                          "loss_fn": "importance_sampling"}, "data.0.loss_fn_inputs.weights"),
    ("forward", {"data": [CE], "loss_fn": "dpo"}, "data"),
    ("forward", {"data": [CE], "loss_fn": "nll"}, "loss_fn"),
    ("optim_step", {"adam_params": {"beta1": 1.0}}, "adam_params.beta1"),
    ("optim_step", {"adam_params": {"eps": 0.0}}, "adam_params.eps"),
    ("optim_step", {"adam_params": {"nesterov": True}}, "adam_params.nesterov"),
    ("sample", {"prompts": []}, "prompts"),
    ("sample", {"prompts": [[1]], "sampling_params": {"top_p": 0.0}}, "sampling_params.top_p"),
    ("sample", {"prompts": [[1]], "num_samples": 0}, "num_samples"),
    ("save_state", {"name": ".hidden"}, "name"),
    ("save_state", {"name": "a/b"}, "name"),
    ("load_state", {"path": "model-01abc", "optimizer": "yes"}, "optimizer"),
]


@pytest.mark.parametrize(("op", "body"), GOOD, ids=[f"{op}-{i}" for i, (op, _) in enumerate(GOOD)])
def test_what_the_api_accepts_the_engine_accepts(op, body):
    stored = SCHEMAS[op].model_validate(body).model_dump(mode="json", exclude_none=op in ("forward_backward", "forward"))
    validate_payload(op, stored)


@pytest.mark.parametrize(("op", "body", "param"), BAD, ids=[f"{op}-{p}" for op, _, p in BAD])
def test_what_the_api_refuses_the_engine_refuses_at_the_same_param(op, body, param):
    with pytest.raises(ValidationError) as api:
        SCHEMAS[op].model_validate(body)
    assert _loc_to_param(("body", *api.value.errors()[0]["loc"])) == param
    if op in ("forward_backward", "forward"):
        body = {"loss_fn": "cross_entropy", **body}  # the API stores its default; the engine has none
    with pytest.raises(EngineError) as engine:
        validate_payload(op, body)
    assert _param(engine.value.param) == param
