"""Sampling through the official `tinker` client against a live Keel: weights saved for the sampler,
then sampled with string and token-id stops, seeds that reproduce, sampled-token and prompt log-probs
equal to a forward's, `save_weights_and_get_sampling_client`; a base model's sampler, which also
samples weights whose trainer has ended, and `asample` over plain HTTP (dedupe on seq_id, bad fields
named, the protobuf future); paths that name nothing of the project."""

from __future__ import annotations

import httpx
import pytest
import tinker
from cookbook_runs import trainer_operations, trainers
from tinker import types
from tinker.proto import response_conv
from tinker_data import supervised


def _forward_logprobs(tc, tokens: list[int]) -> list[float]:
    """log p(tokens[t] | tokens[:t]) for t >= 1, by the training client's forward."""
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [0.0] * (len(tokens) - 1)})
    return tc.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()


def test_sampler_weights_sample_with_stops_seeds_and_logprobs(service, base_model, tinker_url, tinker_key):
    tc = service.create_lora_training_client(base_model=base_model, rank=8, seed=0).result()
    tokenizer = tc.get_tokenizer()
    data = supervised(tokenizer)
    for _ in range(2):
        tc.forward_backward(data, "cross_entropy")
        tc.optim_step(types.AdamParams(learning_rate=5e-3)).result()

    saved = tc.save_weights_for_sampler("snap-1").result()
    assert saved.path == f"tinker://{tc.model_id}/sampler_weights/snap-1"
    sampler = service.create_sampling_client(model_path=saved.path).result()
    prompt_ids = tokenizer.encode("the cat sat")
    prompt = types.ModelInput.from_ints(prompt_ids)

    # A seed reproduces every sequence of a call; the call answers num_samples sequences with their ids.
    params = types.SamplingParams(max_tokens=10, seed=17, temperature=1.0)
    first = sampler.sample(prompt, 3, params, include_prompt_logprobs=True).result()
    again = sampler.sample(prompt, 3, params).result()
    assert [s.tokens for s in first.sequences] == [s.tokens for s in again.sequences]
    assert len(first.sequences) == 3 and all(isinstance(s.sequence_id, str) for s in first.sequences)
    assert len({s.sequence_id for s in first.sequences + again.sequences}) == 6
    assert again.prompt_logprobs is None  # only when asked for

    # Sampled-token log-probs and prompt log-probs equal the training client's forward on the same
    # tokens (it holds the weights the snapshot was saved from).
    for seq in first.sequences:
        assert len(seq.logprobs) == len(seq.tokens) > 0
        assert seq.stop_reason in ("stop", "length")
        forward = _forward_logprobs(tc, prompt_ids + seq.tokens)
        assert seq.logprobs == pytest.approx(forward[-len(seq.tokens):], abs=1e-4)
    assert len(first.prompt_logprobs) == len(prompt_ids) and first.prompt_logprobs[0] is None
    assert first.prompt_logprobs[1:] == pytest.approx(_forward_logprobs(tc, prompt_ids), abs=1e-4)

    # A string stop cuts the same draw where the text first contains it (kept in the tokens).
    long = max(first.sequences, key=lambda s: len(s.tokens))
    assert len(long.tokens) >= 4
    stop_text = tokenizer.decode(long.tokens[2:4])
    assert stop_text.strip()
    cut = sampler.sample(prompt, 3, types.SamplingParams(max_tokens=10, seed=17, stop=[stop_text])).result()
    shorter = cut.sequences[first.sequences.index(long)]
    assert shorter.stop_reason == "stop" and stop_text in tokenizer.decode(shorter.tokens)
    assert len(shorter.tokens) <= 4 and long.tokens[:len(shorter.tokens)] == shorter.tokens

    # A token-id stop ends the sequence at that token.
    token = long.tokens[2]
    by_id = sampler.sample(prompt, 3, types.SamplingParams(max_tokens=10, seed=17, stop=[token])).result()
    ended = by_id.sequences[first.sequences.index(long)]
    assert ended.stop_reason == "stop" and ended.tokens[-1] == token and len(ended.tokens) <= 3

    # Without a name the save answers a sampling session on the weights it saved.
    quick = tc.save_weights_and_get_sampling_client().result()
    out = quick.sample(prompt, 1, types.SamplingParams(max_tokens=4, seed=1)).result().sequences[0]
    assert 0 < len(out.tokens) <= 4
    assert out.logprobs == pytest.approx(_forward_logprobs(tc, prompt_ids + out.tokens)[-len(out.tokens):], abs=1e-4)

    # One system: the samples ran as `sample` operations of the training client's trainer.
    [trainer] = [t for t in trainers(tinker_url, tinker_key) if t["metadata"].get("tinker_model_id") == tc.model_id]
    kinds = [op["kind"] for op in trainer_operations(tinker_url, tinker_key, trainer["id"])]
    assert kinds.count("sample") == 5 and kinds.count("save_weights_for_sampler") == 2


def test_a_base_model_sampler(service, base_model, tinker_url, tinker_key):
    with tinker.ServiceClient(base_url=tinker_url, api_key=tinker_key) as earlier:  # finished: its trainer goes
        gone = earlier.create_lora_training_client(base_model=base_model, rank=4, seed=5).result()
        gone_path = gone.save_weights_for_sampler("kept").result().path
    sampler = service.create_sampling_client(base_model=base_model).result()
    assert sampler.get_tokenizer() is not None  # the base model's directory, loaded by the client
    tokens = sampler.get_tokenizer().encode("birds sing")
    out = sampler.sample(types.ModelInput.from_ints(tokens), 2, types.SamplingParams(max_tokens=5, seed=3)).result()
    assert [len(s.tokens) for s in out.sequences] == [len(s.logprobs) for s in out.sequences]
    assert all(0 < len(s.tokens) <= 5 for s in out.sequences)
    logprobs = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
    assert logprobs[0] is None and len(logprobs) == len(tokens) and all(x < 0 for x in logprobs[1:])

    # Weights whose trainer ended are sampled by the session's sampler trainer: the same one as the base's.
    kept = service.create_sampling_client(model_path=gone_path).result()
    out = kept.sample(types.ModelInput.from_ints(tokens), 1, types.SamplingParams(max_tokens=3, seed=3)).result()
    assert 0 < len(out.sequences[0].tokens) == len(out.sequences[0].logprobs) <= 3
    session_id = service.holder.get_session_id()
    samplers = [t for t in trainers(tinker_url, tinker_key) if t["metadata"].get("tinker_session") == session_id]
    assert [t["metadata"]["tinker_role"] for t in samplers] == ["sampler"] and samplers[0]["lora"] is None
    kinds = [op["kind"] for op in trainer_operations(tinker_url, tinker_key, samplers[0]["id"])]
    assert kinds.count("sample") == 3  # two of the base model's, one of the kept weights

    # The protocol itself: the sampler's description, asample's dedupe and refusals, its future.
    sampler_id = sampler._sampling_session_id
    headers = {"X-API-Key": tinker_key}
    described = httpx.get(f"{tinker_url}/api/v1/samplers/{sampler_id}", headers=headers, timeout=30).json()
    assert described == {"sampler_id": sampler_id, "base_model": base_model, "model_path": None}

    def post(body):
        return httpx.post(f"{tinker_url}/api/v1/asample", json=body, headers=headers, timeout=30)

    body = {"sampling_session_id": sampler_id, "seq_id": 7, "num_samples": 2, "type": "sample",
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": [5, 6, 7]}]},
            "sampling_params": {"max_tokens": 3, "seed": 1, "stop": None, "temperature": 1.0, "top_k": -1,
                                "top_p": 1.0}}
    first, retried = post(body).json(), post(body).json()
    assert first == retried and len(first["sample_sequence_ids"]) == 2  # the client's retry: the same request
    for change, param in (({"topk_sample_logprobs": 2}, "topk_sample_logprobs"),
                          ({"prompt": {"chunks": [{"type": "encoded_text", "tokens": [10**7]}]}}, "prompt.chunks"),
                          ({"prompt": {"chunks": [{"type": "image", "data": "AA==", "format": "png"}]}},
                           "prompt.chunks.0"),
                          ({"sampling_session_id": "sampler-unknown"}, "sampling_session_id")):
        refused = post({**body, "seq_id": 8, **change})
        assert refused.status_code in (400, 404) and refused.json()["param"] == param, refused.text

    for _ in range(20):  # the future: protobuf, as the client reads it
        answer = httpx.post(f"{tinker_url}/api/v1/retrieve_future", json={"request_id": first["request_id"]},
                            headers={**headers, "Accept": "application/x-protobuf"}, timeout=60)
        if answer.headers["content-type"].startswith("application/x-protobuf"):
            break
        assert answer.json()["type"] == "try_again"
    result = response_conv.deserialize_sample_response(answer.content)
    assert len(result.sequences) == 2 and all(0 < len(s.tokens) <= 3 for s in result.sequences)


def test_paths_that_name_nothing_of_the_project_are_refused(service, tinker_url):
    for path, needle in (("tinker://someone-else:train:0/sampler_weights/x", "model_path"),
                         ("not-a-path", "model_path")):
        with pytest.raises((tinker.NotFoundError, tinker.BadRequestError, ValueError)) as err:
            service.create_sampling_client(model_path=path).result()
        assert needle in str(err.value) or "tinker://" in str(err.value)
