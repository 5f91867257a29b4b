"""Training runs and checkpoints through the official `tinker` client against a live Keel: saves
listed with their `tinker://` paths, an export downloaded through its signed links and loaded with
plain `peft` (it reproduces the server's log-probs), checkpoints deleted (the `/` inside their id),
`tinker://` paths as a native model reference, and another project's paths refused naming the field."""

from __future__ import annotations

import urllib.request

import httpx
import pytest
import tinker
import torch
from tinker import types
from tinker._exceptions import RequestFailedError

TEXTS = ["the cat sat on the mat", "a dog ran in the park", "birds sing at dawn"]


def _data(tokenizer) -> list[types.Datum]:
    out = []
    for text in TEXTS:
        ids = tokenizer.encode(text)
        out.append(types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                               loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)}))
    return out


def _native(url: str, key: str, method: str, path: str, **kwargs) -> httpx.Response:
    """A native Keel route with the same key in its Keel form."""
    return httpx.request(method, f"{url}{path}", headers={"Authorization": f"Bearer {key.removeprefix('tml-')}"},
                         timeout=60, **kwargs)


def links_base(run: dict) -> str:
    return f"{run['url']}/api/v1/training_runs/{run['tc'].model_id}"


@pytest.fixture(scope="module")
def run(tinker_url, tinker_key, base_model):
    """A LoRA training client that took one large step, then saved its state, sampler weights and an
    export; the client's session stays open for the module."""
    with tinker.ServiceClient(base_url=tinker_url, api_key=tinker_key) as service:
        tc = service.create_lora_training_client(base_model=base_model, rank=4, seed=0,
                                                 user_metadata={"purpose": "checkpoints"}).result()
        data = _data(tc.get_tokenizer())
        tc.forward_backward(data, "cross_entropy")
        tc.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        saved = {"state": tc.save_state("step-1").result().path,
                 "sampler": tc.save_weights_for_sampler("step-1").result().path,
                 "export": tc.save_weights_external("final").result().path}
        yield {"service": service, "tc": tc, "data": data, "url": tinker_url, "key": tinker_key, "rest": tinker.RestClient(base_url=tinker_url, api_key=tinker_key),
               **saved}


def test_saves_are_listed_as_the_runs_checkpoints(run, tinker_url, tinker_key, base_model):
    tc, rest = run["tc"], run["rest"]
    run_id = tc.model_id
    assert run["state"] == f"tinker://{run_id}/weights/step-1"
    assert run["sampler"] == f"tinker://{run_id}/sampler_weights/step-1"
    assert run["export"] == f"tinker://{run_id}/external_weights/final"

    listed = rest.list_checkpoints(run_id).result().checkpoints
    assert [(c.checkpoint_type, c.checkpoint_id, c.tinker_path) for c in listed] == [
        ("training", "weights/step-1", run["state"]), ("sampler", "sampler_weights/step-1", run["sampler"]),
        ("external", "external_weights/final", run["export"])]
    assert all(c.size_bytes and c.size_bytes > 0 for c in listed)

    info = rest.get_training_run(run_id).result()
    assert (info.training_run_id, info.is_lora, info.lora_rank) == (run_id, True, 4)
    assert (info.base_model, info.user_metadata) == (base_model, {"purpose": "checkpoints"})
    assert info.last_checkpoint.tinker_path == run["state"]
    assert info.last_sampler_checkpoint.tinker_path == run["sampler"]
    assert rest.get_training_run_by_tinker_path(run["export"]).result().training_run_id == run_id
    rest.set_checkpoint_ttl_from_tinker_path(run["export"], 3600).result()  # accepted (Keel keeps it until deleted)

    tc = run["tc"]
    for name, kwargs, param in (("final", {}, "path"), ("no/slash", {}, "path"),
                                ("fresh", {"age_encryption_recipients": ["age1xyz"]}, "age_encryption_recipients")):
        with pytest.raises(RequestFailedError) as refused:
            tc.save_weights_external(name, **kwargs).result()
        assert refused.value.category == types.RequestErrorCategory.User
        assert f"{param}: " in refused.value.message, refused.value.message

    runs = rest.list_training_runs(limit=100).result()
    assert run_id in [r.training_run_id for r in runs.training_runs]
    assert runs.cursor.total_count >= len(runs.training_runs) >= 1
    first = rest.list_training_runs(limit=1, offset=0).result()
    assert len(first.training_runs) == 1 and first.cursor.total_count == runs.cursor.total_count

    # One system: each checkpoint is a Keel model of the run's trainer.
    models = _native(tinker_url, tinker_key, "GET", "/v1/models?limit=100").json()["data"]
    trainer_ids = {m["trainer_id"] for m in models if m["trainer_id"]}
    [trainer] = [t for t in _native(tinker_url, tinker_key, "GET", "/v1/trainers?limit=100").json()["data"]
                 if t["metadata"].get("tinker_model_id") == run_id]
    assert trainer["id"] in trainer_ids


def test_export_downloads_as_a_peft_adapter(run, base_model, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    links = run["rest"].get_external_weights_urls(run["export"]).result()
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(links.urls)
    for name, url in links.urls.items():
        assert url.startswith("http://127.0.0.1:")  # Keel's own download route
        urllib.request.urlretrieve(url, tmp_path / name)
    unsigned = next(iter(links.urls.values())).split("?")[0]
    assert httpx.get(unsigned, timeout=30).status_code == 403
    signed = next(iter(links.urls.values()))
    tampered = signed[:-1] + ("0" if signed[-1] != "0" else "1")
    assert httpx.get(tampered, timeout=30).status_code == 403
    assert httpx.get(signed, timeout=30).status_code == 200

    # The sampler save holds the same weights (nothing ran between the saves); its links work too,
    # though the client itself asks only for an export's.
    sampler_links = httpx.get(f"{links_base(run)}/checkpoints/sampler_weights/step-1/external_weights_urls",
                              headers={"X-API-Key": run["key"]}, timeout=30).json()["urls"]
    sampler_adapter = httpx.get(sampler_links["adapter_model.safetensors"], timeout=30).content
    assert sampler_adapter == (tmp_path / "adapter_model.safetensors").read_bytes()

    data = run["data"]
    served = run["tc"].forward(data, "cross_entropy").result().loss_fn_outputs
    base = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32)
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32),
                                        str(tmp_path)).eval()
    for datum, out in zip(data, served, strict=True):
        ids = torch.tensor([datum.model_input.to_ints()])
        targets = torch.tensor(datum.loss_fn_inputs["target_tokens"].tolist())
        with torch.no_grad():
            mine = torch.log_softmax(adapted(ids).logits[0].float(), -1).gather(1, targets[:, None])[:, 0]
            plain = torch.log_softmax(base(ids).logits[0].float(), -1).gather(1, targets[:, None])[:, 0]
        keel = torch.tensor(out["logprobs"].tolist())
        assert torch.allclose(mine, keel, atol=1e-4), (mine, keel)  # the download is what Keel trained
        assert (mine - plain).abs().max() > 1e-3  # and the step changed the model


def test_tinker_path_is_a_model_reference(run, tinker_url, tinker_key):
    state_model = _native(tinker_url, tinker_key, "POST", "/v1/trainers", json={"model": run["state"]})
    assert state_model.status_code == 201, state_model.text
    trainer = state_model.json()
    assert trainer["model"].startswith("model-")
    # A trainer made through /v1/trainers is a training run too, named by its id.
    native_run = run["rest"].get_training_run(trainer["id"]).result()
    assert (native_run.training_run_id, native_run.is_lora) == (trainer["id"], False)  # no lora: full
    assert run["rest"].list_checkpoints(trainer["id"]).result().checkpoints == []
    _native(tinker_url, tinker_key, "DELETE", f"/v1/trainers/{trainer['id']}")
    missing = _native(tinker_url, tinker_key, "POST", "/v1/trainers",
                      json={"model": run["state"].replace("step-1", "never-saved")})
    assert missing.status_code == 404 and missing.json()["param"] == "model"


def test_another_projects_paths_are_refused(run, tinker_url, other_project_key, base_model, tinker_assets):
    from core.security import tinker_api_key

    key = tinker_api_key(other_project_key[1])
    run_id = run["tc"].model_id
    native = _native(tinker_url, key, "POST", "/v1/trainers", json={"model": run["state"]})
    assert native.status_code == 404 and native.json()["param"] == "model"
    assert run["state"] in native.json()["detail"]
    with open(tinker_assets["sft_train"], "rb") as f:
        upload = _native(tinker_url, key, "POST", "/v1/files", data={"purpose": "sft"},
                         files={"file": ("sft.parquet", f)})
    assert upload.status_code in (200, 201), upload.text
    job = _native(tinker_url, key, "POST", "/v1/jobs", json={
        "model": run["state"], "training_file": upload.json()["id"], "method": {"type": "sft"}})
    assert job.status_code == 404 and job.json()["param"] == "model", job.text

    with tinker.ServiceClient(base_url=tinker_url, api_key=key) as service:
        rest = tinker.RestClient(base_url=tinker_url, api_key=key)
        with pytest.raises(tinker.NotFoundError):
            rest.list_checkpoints(run_id).result()
        with pytest.raises(tinker.NotFoundError):
            rest.get_training_run(run_id).result()
        with pytest.raises(tinker.NotFoundError):
            rest.get_external_weights_urls(run["export"]).result()
        with pytest.raises(tinker.NotFoundError):
            rest.delete_checkpoint_from_tinker_path(run["sampler"]).result()
        assert run_id not in [r.training_run_id for r in rest.list_training_runs(limit=100).result().training_runs]

        tc = service.create_lora_training_client(base_model=base_model, rank=4).result()
        with pytest.raises(RequestFailedError) as failed:
            tc.load_state(run["state"]).result()
        assert failed.value.category == types.RequestErrorCategory.User, failed.value
        assert f"path: {run['state']!r} is not a checkpoint of this project" in failed.value.message
        with pytest.raises(tinker.NotFoundError) as missing:  # create-via-load: refused before any model exists
            service.create_training_client_from_state(run["state"]).result()
        assert "path: " in str(missing.value) and run["state"] in str(missing.value)


def test_checkpoints_are_deleted(run, tinker_url, tinker_key):
    rest, run_id = run["rest"], run["tc"].model_id
    sampler_model = _native(tinker_url, tinker_key, "GET", "/v1/models?limit=100").json()["data"]
    rest.delete_checkpoint_from_tinker_path(run["sampler"]).result()  # DELETE .../checkpoints/sampler_weights/step-1
    rest.delete_checkpoint(run_id, "external_weights/final").result()
    left = [c.tinker_path for c in rest.list_checkpoints(run_id).result().checkpoints]
    assert left == [run["state"]]
    after = {m["id"] for m in _native(tinker_url, tinker_key, "GET", "/v1/models?limit=100").json()["data"]}
    assert len({m["id"] for m in sampler_model} - after) == 2  # the two Keel models went with them
    with pytest.raises(tinker.NotFoundError):
        rest.delete_checkpoint_from_tinker_path(run["sampler"]).result()
    # The last save_state is where the trainer restores from after an idle release: kept, with a 400
    # (the client retries a 409 for minutes).
    with pytest.raises(tinker.BadRequestError) as refused:
        rest.delete_checkpoint_from_tinker_path(run["state"]).result()
    assert "save_state again" in str(refused.value)
    # A deleted export's name is free again.
    assert run["tc"].save_weights_external("final").result().path == run["export"]
