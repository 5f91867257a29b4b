"""The CPU serving engine against transformers: greedy tokens and log-probs equal HF's, seeded n
choices reproduce, stop strings cut where OpenAI cuts, requests joining a running batch answer as if
alone, eight LoRA adapters interleave in one batch (each equal to its merged model), and a tool call
round-trips through a template with tools."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from serving_support import WEATHER_TOOL
from transformers import AutoModelForCausalLM

from engine.serving.engine import CpuEngine, GenerationRequest
from engine.serving.openai_shapes import ServingError, complete, prepare, stream

QUESTION = [{"role": "user", "content": "What is 3 + 4?"}]


def _run(engine: CpuEngine, request: GenerationRequest) -> dict[int, dict]:
    async def go():
        out: dict[int, dict] = {}
        async for d in engine.generate(request):
            c = out.setdefault(d.index, {"tokens": [], "logprobs": [], "text": "", "finish": None})
            c["tokens"].append(d.token_id)
            c["logprobs"].append(d.logprob)
            c["text"] += d.text
            c["finish"] = d.finish_reason or c["finish"]
        return out
    return asyncio.run(go())


def _hf_greedy(path: str, prompt: list[int], max_new: int) -> list[int]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         max_new_tokens=max_new, do_sample=False)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def engine(demo_assets):
    return CpuEngine(demo_assets["model"], max_batch=16)


def _prompt(engine: CpuEngine, messages=QUESTION) -> list[int]:
    return prepare({"messages": messages}, True, engine.tokenizer, engine.max_model_len).request.prompt_ids


def test_greedy_chat_equals_transformers_generate_and_logprobs(engine, demo_assets):
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": 40, "logprobs": True, "top_logprobs": 3,
            "keel": {"return_token_ids": True}}
    answer = asyncio.run(complete(engine, prepare(body, True, engine.tokenizer, engine.max_model_len)))
    prompt = answer["prompt_token_ids"]
    tokens = answer["choices"][0]["token_ids"]
    assert tokens == _hf_greedy(demo_assets["model"], prompt, 40)
    assert answer["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 40, "total_tokens": len(prompt) + 40}
    model = AutoModelForCausalLM.from_pretrained(demo_assets["model"], dtype=torch.float32)
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1].float(), -1)
    expected = logp.gather(-1, torch.tensor(tokens)[:, None])[:, 0]
    got = torch.tensor([e["logprob"] for e in answer["choices"][0]["logprobs"]["content"]])
    assert torch.allclose(got, expected, atol=1e-4), (got - expected).abs().max()
    top = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    assert [t["logprob"] for t in top] == pytest.approx(logp[0].topk(3).values.tolist(), abs=1e-4)


def test_seeded_n_choices_reproduce(engine):
    body = {"messages": QUESTION, "n": 4, "seed": 7, "max_tokens": 24, "temperature": 1.0}
    first = asyncio.run(complete(engine, prepare(body, True, engine.tokenizer, engine.max_model_len)))
    again = asyncio.run(complete(engine, prepare(body, True, engine.tokenizer, engine.max_model_len)))
    other = asyncio.run(complete(engine, prepare({**body, "seed": 8}, True, engine.tokenizer, engine.max_model_len)))
    texts = [c["message"]["content"] for c in first["choices"]]
    assert texts == [c["message"]["content"] for c in again["choices"]]
    assert len(set(texts)) > 1  # the four choices are four draws, not one
    assert texts != [c["message"]["content"] for c in other["choices"]]


def test_stop_strings_cut_where_openai_cuts_and_streaming_matches(engine):
    base = {"messages": QUESTION, "temperature": 0, "max_tokens": 40}
    full = asyncio.run(complete(engine, prepare(base, True, engine.tokenizer, engine.max_model_len)))
    text = full["choices"][0]["message"]["content"].lstrip("\ufffd")
    stop = text[8:12]
    assert len(stop) == 4 and stop.strip()
    at = full["choices"][0]["message"]["content"].find(stop)
    cut = asyncio.run(complete(engine, prepare({**base, "stop": [stop, "never-there"]}, True, engine.tokenizer,
                                               engine.max_model_len)))
    choice = cut["choices"][0]
    assert choice["message"]["content"] == full["choices"][0]["message"]["content"][:at]
    assert choice["finish_reason"] == "stop"
    assert cut["usage"]["completion_tokens"] < 40

    async def streamed(body):
        lines = [line async for line in stream(engine, prepare(body, True, engine.tokenizer, engine.max_model_len))]
        assert lines[-1] == "data: [DONE]\n\n"
        chunks = [json.loads(line[6:]) for line in lines[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        return text, [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]], chunks[-1]

    text, finals, usage = asyncio.run(streamed({**base, "stop": stop, "stream": True,
                                                "stream_options": {"include_usage": True}}))
    assert text == choice["message"]["content"] and finals[0]["choices"][0]["finish_reason"] == "stop"
    assert usage["usage"] == cut["usage"]
    text, _, _ = asyncio.run(streamed({**base, "stream": True}))
    assert text == full["choices"][0]["message"]["content"]


def test_requests_joining_a_running_batch_answer_as_alone(engine):
    prompt = _prompt(engine)
    long = GenerationRequest(prompt_ids=prompt, max_tokens=120, seeds=[11, 12], temperature=1.0)
    short = GenerationRequest(prompt_ids=prompt[:-2], max_tokens=12, seeds=[13], temperature=0.8, top_p=0.9)
    alone_long, alone_short = _run(engine, long), _run(engine, short)

    async def together():
        order, outputs = [], {"long": {}, "short": {}}

        async def collect(name, request, joined=None):
            async for d in engine.generate(request):
                outputs[name].setdefault(d.index, []).append(d.token_id)
                if joined is not None and len(outputs[name][d.index]) == 10 and not joined.is_set():
                    joined.set()
            order.append(name)

        joined = asyncio.Event()
        first = asyncio.create_task(collect("long", long, joined))
        await joined.wait()  # the long request is ten tokens in: the short one joins its batch
        await collect("short", short)
        await first
        return order, outputs

    order, outputs = asyncio.run(together())
    assert order == ["short", "long"]  # it joined and left while the long one kept decoding
    assert outputs["long"] == {i: c["tokens"] for i, c in alone_long.items()}
    assert outputs["short"] == {i: c["tokens"] for i, c in alone_short.items()}


def test_eight_adapters_interleave_each_equal_to_its_merged_model(demo_assets, adapters):
    engine = CpuEngine(demo_assets["model"], max_batch=16)
    for i, (adapter_dir, _) in enumerate(adapters):
        engine.load_adapter(f"a{i}", adapter_dir)
    prompt = _prompt(engine)
    requests = [GenerationRequest(prompt_ids=prompt, max_tokens=30, seeds=[0], temperature=0, adapter=f"a{i}")
                for i in range(8)]
    requests.append(GenerationRequest(prompt_ids=prompt, max_tokens=30, seeds=[0], temperature=0))

    async def all_at_once():
        async def one(r):
            return [d.token_id async for d in engine.generate(r)]
        return await asyncio.gather(*(one(r) for r in requests))

    answers = asyncio.run(all_at_once())
    expected = [_hf_greedy(merged, prompt, 30) for _, merged in adapters] + [_hf_greedy(demo_assets["model"], prompt, 30)]
    assert answers == expected
    assert len({tuple(a) for a in answers}) == 9  # every adapter changes the answer: the test can tell them apart
    stats = engine.stats()
    assert stats["adapters"] == 8 and stats["adapter_bytes"] > 0


def test_tool_call_round_trips_through_a_template_with_tools(tool_model):
    engine = CpuEngine(tool_model)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    body = {"messages": ask, "tools": [WEATHER_TOOL], "temperature": 0, "max_tokens": 100}
    answer = asyncio.run(complete(engine, prepare(body, True, engine.tokenizer, engine.max_model_len)))
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert choice["message"]["content"] is None
    # The tools reach the model through its template; tool_choice "none" leaves them out.
    with_tools = prepare(body, True, engine.tokenizer, engine.max_model_len).request.prompt_ids
    without = prepare({**body, "tool_choice": "none"}, True, engine.tokenizer, engine.max_model_len).request.prompt_ids
    assert "System: tools get_weather" in engine.tokenizer.decode(with_tools)
    assert "get_weather" not in engine.tokenizer.decode(without)
    follow = ask + [choice["message"], {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"}]
    second = prepare({**body, "messages": follow}, True, engine.tokenizer, engine.max_model_len)
    rendered = engine.tokenizer.decode(second.request.prompt_ids)
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>' in rendered
    assert "Tool: sunny, 21 C\nAssistant:\n" in rendered

    async def streamed():
        lines = [line async for line in stream(engine, prepare({**body, "stream": True}, True, engine.tokenizer,
                                                               engine.max_model_len))]
        return [json.loads(line[6:]) for line in lines[:-1]]

    chunks = asyncio.run(streamed())
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == ""
    last = chunks[-1]["choices"][0]
    assert last["finish_reason"] == "tool_calls" and last["delta"]["tool_calls"][0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize("body,param,code", [
    ({"max_tokens": 10_000}, "messages", "context_length_exceeded"),
    ({"messages": [{"role": "user", "content": "word " * 600}]}, "messages", "context_length_exceeded"),
    ({"n": 0}, "n", "invalid_value"),
    ({"temperature": 3}, "temperature", "invalid_value"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
    ({"messages": []}, "messages", "invalid_value"),
])
def test_bad_requests_are_openai_errors_naming_the_param(engine, body, param, code):
    with pytest.raises(ServingError) as err:
        prepare({"messages": QUESTION, **body}, True, engine.tokenizer, engine.max_model_len)
    assert err.value.status == 400
    assert err.value.body()["error"]["param"] == param and err.value.body()["error"]["code"] == code
