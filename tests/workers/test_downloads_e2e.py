"""Download what Keel trained and load it with plain `transformers` / `peft`, through the HTTP API, a
real Celery worker and a real local Ray: a reward model scores as the engine scores, a LoRA SFT output
loads as an adapter and as merged weights, checkpoints download as Hugging Face directories (with the
training state on request), a checkpoint is the model of a new job, retention keeps the newest N, and
deleting a job frees its checkpoints but keeps its model."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from tests.workers.test_pipeline_e2e import _wait

pytestmark = pytest.mark.slow

TEXTS = ["Q: What is 2 + 3? A: 5, happy to help!", "Q: What is 7 + 1? A: figure it out yourself."]


def _upload(client, auth, demo_assets, name: str, purpose: str) -> str:
    with open(demo_assets[name], "rb") as f:
        r = client.post("/v1/files", headers=auth, data={"purpose": purpose}, files={"file": (Path(f.name).name, f)})
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


def _run(client, auth, body: dict) -> dict:
    r = client.post("/v1/jobs", headers=auth, json=body)
    assert r.status_code == 201, r.text
    job = _wait(client, auth, r.json()["id"])
    assert job["status"] == "succeeded", job["error"]
    return job


def _unpack(client, auth, url: str, out: Path) -> Path:
    from keel_client import extract_tar

    r = client.get(url, headers=auth)
    assert r.status_code == 200, r.text
    extract_tar(io.BytesIO(r.content), out)
    return out


def _rm_method(steps: int, **trainer) -> dict:
    return {"type": "reward_model", "hyperparameters": {
        "max_token_len_per_gpu": 1024, "data": {"train_batch_size": 16, "max_length": 96}, "optim": {"lr": 1e-3},
        "trainer": {"total_training_steps": steps, "save_freq": 1, **trainer}}}


def test_trained_models_and_checkpoints_download_and_load(client, auth, celery_worker, demo_assets, tmp_path,
                                                          keel_home):
    from peft import PeftModel
    from transformers import (
        AutoModelForCausalLM,
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )

    from engine.config import ModelConfig
    from engine.models import load_reward_model, reward_scores

    pairs = {"training_file": _upload(client, auth, demo_assets, "preference_train", "preference"),
             "validation_file": _upload(client, auth, demo_assets, "preference_val", "preference")}
    rm = _run(client, auth, {"model": demo_assets["model"], **pairs,
                             "method": _rm_method(4, max_actor_ckpt_to_keep=2)})

    # Retention: two checkpoints are left, rows and directories.
    ckpts = client.get(f"/v1/jobs/{rm['id']}/checkpoints", headers=auth).json()["data"]
    assert [c["step"] for c in ckpts] == [4, 3]
    steps = keel_home / "artifacts" / "jobs" / rm["id"] / "checkpoints"
    assert sorted(p.name for p in steps.iterdir() if p.name.startswith("step_")) == ["step_3", "step_4"]

    # The reward model, loaded with plain transformers, scores exactly as the engine does.
    model = client.get(f"/v1/models/{rm['output_model']}", headers=auth).json()
    downloaded = _unpack(client, auth, f"/v1/models/{model['id']}/content", tmp_path / "rm")
    tok = AutoTokenizer.from_pretrained(downloaded)
    enc = tok(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        hf = AutoModelForSequenceClassification.from_pretrained(downloaded).eval()
        scores = hf(**enc).logits[:, 0]
        engine = load_reward_model(str(keel_home / "artifacts" / "jobs" / rm["id"] / "output"), ModelConfig(),
                                   trainable=False)
        assert torch.allclose(scores, reward_scores(engine, enc["input_ids"], enc["attention_mask"]), atol=1e-5)

        # The last checkpoint is that same model; `include=training_state` adds the optimizer and RNG.
        step4 = _unpack(client, auth, f"/v1/checkpoints/{ckpts[0]['id']}/content", tmp_path / "step4")
        ckpt_model = AutoModelForSequenceClassification.from_pretrained(step4).eval()
        assert torch.allclose(ckpt_model(**enc).logits[:, 0], scores, atol=1e-5)
    assert not (step4 / "training_state").exists()
    full = _unpack(client, auth, f"/v1/checkpoints/{ckpts[0]['id']}/content?include=training_state", tmp_path / "s")
    assert {"model.optim.pt", "rng.pt", "extra.json"} <= {p.name for p in (full / "training_state").iterdir()}

    # A checkpoint is the model of a new job.
    again = _run(client, auth, {"model": ckpts[1]["id"], **pairs, "method": _rm_method(2)})
    assert again["model"] == ckpts[1]["id"]

    # LoRA SFT: the adapter (peft) and the merged weights (transformers) give the same logits.
    sft = _run(client, auth, {
        "model": demo_assets["model"], "training_file": _upload(client, auth, demo_assets, "sft_train", "sft"),
        "method": {"type": "sft", "hyperparameters": {
            "max_token_len_per_gpu": 256, "model": {"lora_rank": 4, "lora_alpha": 8}, "optim": {"lr": 1e-2},
            "data": {"train_batch_size": 16, "max_prompt_length": 32, "max_response_length": 32},
            "trainer": {"total_training_steps": 2}}}})
    lora = sft["output_model"]
    assert client.get(f"/v1/models/{lora}", headers=auth).json()["format"] == "lora"
    adapter = _unpack(client, auth, f"/v1/models/{lora}/content", tmp_path / "adapter")
    merged = _unpack(client, auth, f"/v1/models/{lora}/content?merged=true", tmp_path / "merged")
    assert (adapter / "adapter_config.json").exists() and not (adapter / "config.json").exists()
    enc = AutoTokenizer.from_pretrained(adapter)(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(demo_assets["model"]), adapter).eval()
        policy = AutoModelForCausalLM.from_pretrained(merged).eval()
        assert torch.allclose(peft(**enc).logits, policy(**enc).logits, atol=1e-4)

    # Deleting the reward-model job frees its checkpoints; its model stays downloadable.
    assert client.delete(f"/v1/jobs/{rm['id']}", headers=auth).status_code == 200
    assert not steps.exists()
    assert client.get(f"/v1/models/{model['id']}/content", headers=auth).status_code == 200
    assert client.get(f"/v1/checkpoints/{ckpts[0]['id']}", headers=auth).status_code == 404
