"""The serving engine on a real Ray Serve (loopback), driven over HTTP as the API forwards to it
(docs/inference.md) and with the real `openai` client: JSON and SSE answers, OpenAI-shaped errors, an
evicted adapter loaded again, a replica killed mid-stream, and scale-down to zero replicas when idle."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import openai
import pytest

from engine.serving.deployment import app_name

QUESTION = [{"role": "user", "content": "What is 3 + 4?"}]


def _keel(base: str, adapter: str | None = None, **extra) -> dict:
    return {"keel": {"base_model": base, "adapter": adapter, "model_name": "demo-model", "max_model_len": 512,
                     **extra}}


def _replica(base: str):
    from ray import serve

    return serve.get_app_handle(app_name(base))


@pytest.fixture(scope="module")
def client(serve_url):
    return openai.OpenAI(base_url=serve_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_ingress_answers_the_contract_in_json_and_sse(client, serve_url, demo_assets):
    base = demo_assets["model"]
    answer = client.chat.completions.create(model="demo-model", messages=QUESTION, max_tokens=16, temperature=0,
                                            extra_body=_keel(base, return_token_ids=True, trajectory_id="t1"))
    assert answer.model == "demo-model" and answer.object == "chat.completion"
    assert answer.usage.completion_tokens == 16 and answer.choices[0].finish_reason == "length"
    raw = answer.model_dump()
    assert len(raw["choices"][0]["token_ids"]) == 16 and raw["prompt_token_ids"]
    assert raw["keel"]["trajectory_id"] == "t1" and len(raw["keel"]["choices"][0]["logprobs"]) == 16
    chunks = list(client.chat.completions.create(model="demo-model", messages=QUESTION, max_tokens=16, temperature=0,
                                                 stream=True, stream_options={"include_usage": True},
                                                 extra_body=_keel(base)))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer.choices[0].message.content
    assert chunks[-1].usage.total_tokens == answer.usage.total_tokens
    text = client.completions.create(model="demo-model", prompt="User: What is 2 + 2?\nAssistant:\n", max_tokens=8,
                                     temperature=0, logprobs=2, extra_body=_keel(base))
    assert text.object == "text_completion" and len(text.choices[0].logprobs.token_logprobs) == 8
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="demo-model", messages=QUESTION, max_tokens=5000, extra_body=_keel(base))
    assert err.value.body["param"] == "messages" and err.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="x", messages=QUESTION, extra_body=_keel(base, adapter="/no/such/adapter"))
    assert err.value.body["code"] == "model_not_found"
    assert httpx.post(serve_url + "/v1/chat/completions", json={"messages": QUESTION}).status_code == 400


def test_an_evicted_adapter_is_loaded_again(client, demo_assets, adapters):
    base = demo_assets["model"]
    replica = _replica(base)
    before = replica.info.remote().result()["adapter_loads"]
    answers = []
    for i in (0, 1, 2, 0):  # two adapters per replica: the third evicts the first, asked for again
        answers.append(client.chat.completions.create(
            model="demo-model", messages=QUESTION, max_tokens=12, temperature=0,
            extra_body=_keel(base, adapter=adapters[i][0])).choices[0].message.content)
    assert answers[0] == answers[3] and len(set(answers[:3])) == 3
    assert replica.info.remote().result()["adapter_loads"] - before == 4


def test_a_replica_killed_mid_stream_ends_it_with_an_error_and_a_new_one_serves(client, serve_url, demo_assets):
    base = demo_assets["model"]
    old_pid = _replica(base).info.remote().result()["pid"]
    body = {"messages": QUESTION, "max_tokens": 480, "n": 16, "temperature": 1.0, "seed": 1, "stream": True,
            **_keel(base)}
    events = []
    with httpx.stream("POST", serve_url + "/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line:
                continue
            events.append(line)
            if len(events) == 20:
                os.kill(old_pid, signal.SIGKILL)
    assert events[-1] != "data: [DONE]"
    error = json.loads(events[-1].removeprefix("data: "))
    assert error["error"]["code"] == "model_unavailable" and "Traceback" not in error["error"]["message"]
    answer = client.chat.completions.create(model="demo-model", messages=QUESTION, max_tokens=4, extra_body=_keel(base))
    assert answer.usage.completion_tokens == 4
    assert _replica(base).info.remote().result()["pid"] != old_pid


def test_an_idle_base_model_scales_down_to_no_replicas(client, demo_assets):
    from ray import serve

    base = demo_assets["model"]
    client.chat.completions.create(model="demo-model", messages=QUESTION, max_tokens=2, extra_body=_keel(base))

    def running() -> int:
        states = serve.status().applications[app_name(base)].deployments["model"].replica_states
        return sum(n for state, n in states.items() if str(state).endswith("RUNNING"))

    assert running() >= 1
    deadline = time.monotonic() + 120
    while running() and time.monotonic() < deadline:
        time.sleep(1)
    assert running() == 0
