"""What the API decides before Serve is asked, through the official `openai` client against the live API:
unknown and other projects' models (404 `model_not_found` naming `model`), the deployment's limits and the
context window, unsupported parameters (400 naming them), the tokens-per-minute limit (429), a Serve that
is down (503), the shared base models in `models.list()`, and the per-model metrics without tenants."""

from __future__ import annotations

import re

import httpx
import openai
import pytest
from sqlalchemy import select

from api.openai import inference
from core.config import settings
from core.db import session_scope
from core.models import ApiKey, Model

HI = [{"role": "user", "content": "hi"}]


def _chat(client: openai.OpenAI, model: str, **kw):
    return client.chat.completions.create(model=model, messages=HI, **kw)


def _refused(kind: type[openai.APIStatusError], call, *args, **kw) -> openai.APIStatusError:
    with pytest.raises(kind) as caught:
        call(*args, **kw)
    return caught.value


def _add_model(project_id: str, kind: str = "policy") -> str:
    with session_scope() as db:
        model = Model(project_id=project_id, name="m", kind=kind, format="hf", base_model="/nowhere", path="/nowhere")
        db.add(model)
        db.flush()
        return model.id


@pytest.mark.parametrize("model", ["gpt-4o", "model-01zzzzzzzzzzzzzzzzzzzzzzzz", "ckpt-01zzzzzzzzzzzzzzzzzzzzzzzz",
                                   "ft:model:nobody:x:01zzzzzzzzzzzzzzzzzzzzzzzz", "/etc",
                                   "tinker://nobody/sampler_weights/x", "/../etc/passwd"])
def test_unknown_models_are_404_naming_model(oai, serve_down, model):
    for call in (lambda: _chat(oai, model), lambda: oai.completions.create(model=model, prompt="hi")):
        err = _refused(openai.NotFoundError, call)
        assert (err.code, err.param, err.type) == ("model_not_found", "model", "invalid_request_error")


def test_another_projects_model_reads_as_missing(oai, other_oai, project_key, serve_down):
    mine = _add_model(project_key[0])
    err = _refused(openai.NotFoundError, _chat, other_oai, mine)
    assert (err.code, err.param) == ("model_not_found", "model")
    unknown = "model-01zzzzzzzzzzzzzzzzzzzzzzzz"
    assert err.body["message"] == _refused(openai.NotFoundError, _chat, other_oai, unknown).body["message"].replace(
        unknown, mine)  # word for word what a model that does not exist gets
    # The owner gets past resolution (to the Serve that is down).
    assert _refused(openai.InternalServerError, _chat, oai, mine).status_code == 503


def test_a_scoring_model_does_not_generate(oai, project_key, serve_down):
    err = _refused(openai.BadRequestError, _chat, oai, _add_model(project_key[0], kind="reward_model"))
    assert (err.code, err.param) == ("invalid_model", "model")


def test_limits_and_the_context_window_name_their_param(oai, demo_assets, serve_down):
    model = demo_assets["model"]  # a 512-token context window
    cases = [({"n": settings.INFERENCE_MAX_N + 1}, "n", "invalid_value"),
             ({"max_tokens": settings.INFERENCE_MAX_TOKENS + 1}, "max_tokens", "invalid_value"),
             ({"max_completion_tokens": settings.INFERENCE_MAX_TOKENS + 1}, "max_completion_tokens", "invalid_value"),
             ({"max_tokens": 512}, "max_tokens", "context_length_exceeded"),
             ({"max_tokens": 10, "max_completion_tokens": 600}, "max_completion_tokens", "context_length_exceeded"),
             ({"n": 0}, "n", "invalid_value"),
             ({"temperature": 2.5}, "temperature", "invalid_value"),
             ({"top_logprobs": 3}, "top_logprobs", "invalid_value"),
             ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
             ({"logit_bias": {"1": 5}}, "logit_bias", "unknown_parameter"),
             ({"frequency_penalty": 0.5}, "frequency_penalty", "invalid_value"),
             ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.type",
              "invalid_value"),
             ({"tool_choice": "required"}, "tool_choice", "invalid_value"),
             ({"extra_body": {"trajectory_id": ""}}, "trajectory_id", "invalid_value")]
    for kw, param, code in cases:
        err = _refused(openai.BadRequestError, _chat, oai, model, **kw)
        assert (err.param, err.code, err.status_code) == (param, code, 400), kw
    err = _refused(openai.BadRequestError, oai.chat.completions.create, model=model, messages=[])
    assert err.param == "messages"
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]
    assert _refused(openai.BadRequestError, oai.chat.completions.create, model=model,
                    messages=image).param == "messages.0.content"
    err = _refused(openai.BadRequestError, oai.completions.create, model=model, prompt="hi", max_tokens=600)
    assert (err.param, err.code) == ("max_tokens", "context_length_exceeded")
    assert _refused(openai.BadRequestError, oai.completions.create, model=model, prompt="hi", echo=True).param == "echo"
    assert _refused(openai.BadRequestError, oai.completions.create, model=model, prompt=["a", "b"]).param == "prompt"


def test_serve_down_is_503(oai, demo_assets, serve_down):
    for stream in (False, True):
        err = _refused(openai.InternalServerError, _chat, oai, demo_assets["model"], stream=stream)
        assert (err.status_code, err.code) == (503, "serve_unavailable")
        assert err.response.headers["retry-after"] == "5"


def test_tokens_per_minute_are_limited_per_key(oai, other_oai, project_key, demo_assets, serve_down, monkeypatch):
    monkeypatch.setattr(settings, "INFERENCE_TOKENS_PER_MINUTE", 100)
    with session_scope() as db:
        key_id = db.scalar(select(ApiKey.id).where(ApiKey.project_id == project_key[0]))
    # The key's earlier completions used 150 tokens (as Serve's `usage` reported them).
    inference._TOKENS.spend(key_id, 100, 150)
    err = _refused(openai.RateLimitError, _chat, oai, demo_assets["model"])
    assert err.code == "rate_limited" and int(err.response.headers["retry-after"]) >= 1
    # Another key has its own budget (it reaches the Serve that is down).
    assert _refused(openai.InternalServerError, _chat, other_oai, demo_assets["model"]).status_code == 503


def test_models_list_shows_the_shared_base_models(oai, other_oai, demo_assets):
    for client in (oai, other_oai):
        listed = {m.id: m for m in client.models.list().data}
        assert demo_assets["model"] in listed and demo_assets["tokenizer"] not in listed
        entry = listed[demo_assets["model"]]
        assert (entry.object, entry.owned_by) == ("model", "keel") and entry.created > 0


def test_metrics_are_per_base_model_without_tenants(oai, live_server, project_key, demo_assets, serve_down):
    _refused(openai.InternalServerError, _chat, oai, demo_assets["model"])
    text = httpx.get(f"{live_server}/metrics", trust_env=False).text
    lines = [line for line in text.splitlines() if line.startswith("keel_inference_")]
    assert re.search(r'keel_inference_requests_total\{base_model="model",endpoint="chat/completions",'
                     r'outcome="unavailable"\} [1-9]', text)
    assert 'keel_inference_in_flight{base_model="model",endpoint="chat/completions"} 0.0' in lines
    assert not any(project_key[0] in line or "proj-" in line for line in lines)
