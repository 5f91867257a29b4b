"""Training through the official `tinker` client against a live Keel: supervised steps that learn,
forward equal to forward_backward, importance-sampling steps, the seq_id rules, the user-category
errors naming the field, and one system underneath (the client's models are Keel trainers)."""

from __future__ import annotations

import math
import time

import httpx
import pytest
import tinker
from tinker import types
from tinker._exceptions import RequestFailedError
from tinker.lib.api_future_impl import _APIFuture
from tinker_data import TEXTS, supervised


def _keel(url: str, key: str, path: str) -> dict:
    """A native Keel route with the same key (its Keel form, as a bearer token)."""
    response = httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {key.removeprefix('tml-')}"}, timeout=30)
    response.raise_for_status()
    return response.json()


def _trainer_of(url: str, key: str, model_id: str) -> dict:
    trainers = _keel(url, key, "/v1/trainers?limit=100")["data"]
    [trainer] = [t for t in trainers if t["metadata"].get("tinker_model_id") == model_id]
    return trainer


def test_supervised_steps_learn_and_the_session_closes(tinker_url, tinker_key, base_model):
    with tinker.ServiceClient(base_url=tinker_url, api_key=tinker_key) as service:
        tc = service.create_lora_training_client(base_model=base_model, rank=16, seed=0).result()
        assert tc.model_id.endswith(":train:0")
        tokenizer = tc.get_tokenizer()  # get_info's tokenizer_id: the local model directory
        data = supervised(tokenizer)

        forward = tc.forward(data, "cross_entropy").result()
        first = tc.forward_backward(data, "cross_entropy").result()
        assert forward.metrics["loss:sum"] == pytest.approx(first.metrics["loss:sum"], rel=1e-4, abs=1e-4)
        for out, datum in zip(first.loss_fn_outputs, data, strict=True):
            assert len(out["logprobs"].tolist()) == datum.model_input.length
        optim = tc.optim_step(types.AdamParams(learning_rate=5e-3, grad_clip_norm=1.0)).result()
        assert optim.metrics is not None

        losses = [first.metrics["loss:sum"]]
        for _ in range(19):
            fb = tc.forward_backward(data, "cross_entropy")
            step = tc.optim_step(types.AdamParams(learning_rate=5e-3, grad_clip_norm=1.0))
            losses.append(fb.result().metrics["loss:sum"])
            step.result()
        after = tc.forward(data, "cross_entropy").result().metrics["loss:sum"]
        assert after <= 0.7 * losses[0], losses + [after]

        # One system: the training client is a Keel trainer that took 20 steps.
        trainer = _trainer_of(tinker_url, tinker_key, tc.model_id)
        assert trainer["step"] == 20 and trainer["lora"]["rank"] == 16
        assert trainer["status"] in ("active", "idle")
        metrics = httpx.get(f"{tinker_url}/metrics", timeout=30).text
        assert 'route="/api/v1/forward_backward"' in metrics
        assert _gauge(metrics, 'keel_trainers{status="active"}') + _gauge(metrics, 'keel_trainers{status="idle"}') >= 1
        session_id = tc.model_id.split(":")[0]
    # Leaving the `with` finished the session: its trainer is deleted (its actor released).
    trainer = _keel(tinker_url, tinker_key, f"/v1/trainers/{trainer['id']}")
    assert trainer["status"] == "deleted"
    heartbeat = httpx.post(f"{tinker_url}/api/v1/session_heartbeat", json={"session_id": session_id},
                           headers={"X-API-Key": tinker_key}, timeout=30)
    assert heartbeat.status_code == 410  # the client's heartbeat loop stops on it


def _gauge(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))


def test_importance_sampling_steps(service, base_model):
    tc = service.create_lora_training_client(base_model=base_model, rank=8, seed=1).result()
    tokenizer = tc.get_tokenizer()
    prompts = [tokenizer.encode(t) for t in TEXTS]
    # The "sampler" log-probs: the policy's own, so the first ratio is 1.
    scored = tc.forward(supervised(tokenizer), "cross_entropy").result()
    data = []
    for ids, out, advantage in zip(prompts, scored.loss_fn_outputs, (1.0, -1.0, 0.5, -0.5), strict=True):
        n = len(ids) - 1
        data.append(types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                                loss_fn_inputs={"target_tokens": ids[1:], "logprobs": out["logprobs"].tolist(),
                                                "advantages": [advantage] * n}))
    for step in range(5):
        result = tc.forward_backward(data, "importance_sampling").result()
        tc.optim_step(types.AdamParams(learning_rate=1e-3)).result()
        assert all(":" in key for key in result.metrics)
        assert math.isfinite(result.metrics["loss:sum"])
        if step == 0:
            assert result.metrics["ratio_mean:mean"] == pytest.approx(1.0, abs=1e-4)
    assert result.metrics["ratio_mean:mean"] != pytest.approx(1.0, abs=1e-6)  # the policy moved


def _failure(future) -> RequestFailedError:
    with pytest.raises(RequestFailedError) as info:
        future.result()
    assert info.value.category == types.RequestErrorCategory.User, info.value
    return info.value


def _post(url: str, key: str, path: str, body: dict) -> dict:
    response = httpx.post(f"{url}/api/v1/{path}", json=body, headers={"X-API-Key": key}, timeout=30)
    response.raise_for_status()
    return response.json()


def test_bad_requests_fail_as_user_errors_naming_the_field(service, base_model, tinker_url, tinker_key):
    tc = service.create_lora_training_client(base_model=base_model, rank=4).result()
    data = supervised(tc.get_tokenizer())

    error = _failure(tc.forward_backward(data, "gspo"))  # Tinker knows it; Keel does not
    assert "loss_fn" in str(error)
    error = _failure(tc.forward_backward([_rl(data[0])], "ppo", {"clip_low_threshold": 0.9, "bogus": 1.0}))
    assert "loss_fn_config.bogus" in str(error)
    short = types.Datum(model_input=data[0].model_input,
                        loss_fn_inputs={"target_tokens": data[0].loss_fn_inputs["target_tokens"].tolist()[:-1],
                                        "weights": data[0].loss_fn_inputs["weights"].tolist()})
    error = _failure(tc.forward_backward([short], "cross_entropy"))
    assert "data.0.loss_fn_inputs.target_tokens" in str(error)
    ids = data[0].model_input.to_ints()
    image = types.ModelInput(chunks=[types.EncodedTextChunk(tokens=ids),
                                     types.ImageChunk(data=b"\x89PNG", format="png", expected_tokens=2)])
    with_image = types.Datum(model_input=image, loss_fn_inputs={"target_tokens": [0] * (len(ids) + 2),
                                                                "weights": [1.0] * (len(ids) + 2)})
    error = _failure(tc.forward_backward([with_image], "cross_entropy"))  # a protobuf Keel cannot use
    assert "data[0].model_input.chunks[1]" in str(error)
    # The rejected seq_ids took their turn: the next request runs.
    assert math.isfinite(tc.forward_backward(data, "cross_entropy").result().metrics["loss:sum"])

    # Below the client: its next seq_id, then a gap, then the same seq_id again.
    following = tc._request_id_counter + 1
    step = {"model_id": tc.model_id, "adam_params": {"learning_rate": 1e-3}}
    gap = _post(tinker_url, tinker_key, "optim_step", {**step, "seq_id": following + 3})
    error = _failure(_future(tc, gap["request_id"], types.OptimStepResponse))
    assert "seq_id" in str(error)
    first = _post(tinker_url, tinker_key, "optim_step", {**step, "seq_id": following})
    again = _post(tinker_url, tinker_key, "optim_step", {**step, "seq_id": following})
    assert again["request_id"] == first["request_id"] and first["model_id"] == tc.model_id
    assert _future(tc, first["request_id"], types.OptimStepResponse).result().metrics


def _rl(datum: types.Datum) -> types.Datum:
    n = datum.model_input.length
    return types.Datum(model_input=datum.model_input,
                       loss_fn_inputs={"target_tokens": datum.loss_fn_inputs["target_tokens"].tolist(),
                                       "logprobs": [-1.0] * n, "advantages": [1.0] * n})


def _future(tc, request_id: str, result_type):
    """The client's own future machinery (long-poll, try_again, errors) on a request posted by hand."""
    return _APIFuture(result_type, tc.holder, types.UntypedAPIFuture(request_id=request_id),
                      request_start_time=time.time(), request_type="OptimStep")


def test_keys_travel_in_tinker_form(tinker_url, tinker_key, base_model):
    ok = httpx.post(f"{tinker_url}/api/v1/client/config", json={"sdk_version": "0.38.0"},
                    headers={"X-API-Key": tinker_key}, timeout=30)
    assert ok.status_code == 200 and ok.json()["parallel_fwdbwd_chunks"] is False
    rest = tinker.RestClient(base_url=tinker_url, api_key=tinker_key)
    models = [m.model_name for m in rest.get_server_capabilities().result().supported_models]
    assert base_model in models
    for bad in ("tml-keel_not-a-key", "tml-", ""):
        refused = httpx.post(f"{tinker_url}/api/v1/client/config", json={}, headers={"X-API-Key": bad}, timeout=30)
        assert refused.status_code == 401, bad
    assert httpx.get(f"{tinker_url}/api/v1/healthz", timeout=30).json() == {"status": "ok"}


def test_a_new_key_comes_in_both_forms_and_is_revoked_in_both(tinker_url):
    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project

    with session_scope() as db:
        project, _ = get_or_create_project(db, "tinker-keys")
        admin = {"Authorization": f"Bearer {create_api_key(db, project, admin=True)}"}
    created = httpx.post(f"{tinker_url}/v1/keys", json={"name": "tinker"}, headers=admin, timeout=30).json()
    assert created["tinker_api_key"] == "tml-" + created["key"]
    tml = {"X-API-Key": created["tinker_api_key"]}
    session = httpx.post(f"{tinker_url}/api/v1/create_session", json={"tags": [], "sdk_version": "0.38.0"},
                         headers=tml, timeout=30)
    assert session.status_code == 200 and session.json()["session_id"]
    httpx.delete(f"{tinker_url}/v1/keys/{created['id']}", headers=admin, timeout=30).raise_for_status()
    refused = httpx.post(f"{tinker_url}/api/v1/session_heartbeat", json={"session_id": session.json()["session_id"]},
                         headers=tml, timeout=30)
    assert refused.status_code == 401


def test_create_model_is_idempotent_and_names_a_bad_base_model(tinker_url, tinker_key, base_model):
    session = _post(tinker_url, tinker_key, "create_session", {"tags": [], "sdk_version": "0.38.0"})["session_id"]
    body = {"session_id": session, "model_seq_id": 0, "base_model": base_model, "lora_config": {"rank": 4}}
    first = _post(tinker_url, tinker_key, "create_model", body)
    assert first["model_id"] == f"{session}:train:0"
    assert _post(tinker_url, tinker_key, "create_model", body) == first  # a retried create: the same model
    bad = httpx.post(f"{tinker_url}/api/v1/create_model", headers={"X-API-Key": tinker_key}, timeout=30,
                     json={**body, "model_seq_id": 1, "base_model": base_model + "-missing"})
    assert bad.status_code in (404, 422) and bad.json()["param"] == "base_model"
    _post(tinker_url, tinker_key, f"sessions/{session}/finish", {"reason": {"type": "success"}})
