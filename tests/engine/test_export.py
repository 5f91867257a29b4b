"""Every checkpoint holds the model as a Hugging Face directory (`hf/`), loadable with plain
`transformers` / `peft`: the supervised trainers' checkpoints and each PPO role's part."""

from __future__ import annotations

import os

import pytest
import torch

from engine.config import PPOConfig, build_config
from engine.models import reward_scores, token_values
from engine.runtime.checkpoint import COMPLETE, HF_EXPORT, latest_checkpoint
from engine.runtime.reporting import RecordingReporter

pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (tests/engine/conftest.py)


def _batch(demo_assets):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_assets["model"])
    enc = tok(["what is 2 + 3 ?", "a much longer question about 7 + 8 ?"], return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


def test_reward_model_checkpoints_export_a_sequence_classifier(demo_assets, tmp_path):
    from transformers import AutoModelForSequenceClassification

    from engine.methods.reward_model import run_reward_model
    from tests.engine.test_reward_model import rm_request

    request = rm_request(demo_assets, tmp_path, steps=2, config={"trainer": {"save_freq": 1}})
    run_reward_model(request, RecordingReporter())
    first = os.path.join(request.checkpoint_dir, "step_1", HF_EXPORT)
    last = os.path.join(latest_checkpoint(request.checkpoint_dir), HF_EXPORT)
    assert os.path.isfile(os.path.join(last, "config.json")) and os.path.isfile(os.path.join(last, "tokenizer.json"))
    ids, mask = _batch(demo_assets)
    with torch.no_grad():
        step2 = AutoModelForSequenceClassification.from_pretrained(last).eval()
        step1 = AutoModelForSequenceClassification.from_pretrained(first).eval()
        output = AutoModelForSequenceClassification.from_pretrained(request.output_dir).eval()
        hf = step2(input_ids=ids, attention_mask=mask).logits[:, 0]
        # The last checkpoint is the output model; the first one is an earlier state.
        assert torch.allclose(hf, output(input_ids=ids, attention_mask=mask).logits[:, 0], atol=1e-6)
        assert not torch.allclose(hf, step1(input_ids=ids, attention_mask=mask).logits[:, 0], atol=1e-6)
        assert torch.allclose(hf, reward_scores(step2, ids, mask), atol=1e-5)


def test_lora_sft_checkpoint_exports_merged_weights_and_the_adapter(demo_assets, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from engine.methods.sft import run_sft
    from tests.engine.test_sft import sft_request

    request = sft_request(demo_assets, tmp_path, steps=2, config={
        "model": {"lora_rank": 4, "lora_alpha": 8}, "optim": {"lr": 1e-2}})
    run_sft(request, RecordingReporter())
    hf = os.path.join(latest_checkpoint(request.checkpoint_dir), HF_EXPORT)
    ids, mask = _batch(demo_assets)
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(hf).eval()
        base = AutoModelForCausalLM.from_pretrained(demo_assets["model"])
        adapted = PeftModel.from_pretrained(base, os.path.join(hf, "adapter")).eval()
        want = adapted(input_ids=ids, attention_mask=mask).logits
        assert torch.allclose(merged(input_ids=ids, attention_mask=mask).logits, want, atol=1e-4)
        plain = AutoModelForCausalLM.from_pretrained(demo_assets["model"]).eval()
        assert not torch.allclose(plain(input_ids=ids, attention_mask=mask).logits, want, atol=1e-4)


def test_ppo_role_parts_export_policy_and_value_model(demo_assets, tmp_path):
    """The actor's part loads as a causal LM, the critic's as a token classifier whose per-token
    logits are the critic's values."""
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    from engine.roles.actor import ActorRollout
    from engine.roles.critic import Critic

    cfg = build_config(PPOConfig, {})
    ids, mask = _batch(demo_assets)
    critic = Critic(cfg, demo_assets["model"], total_steps=1)
    critic.save_checkpoint(str(tmp_path / "critic"))
    with torch.no_grad():
        values = AutoModelForTokenClassification.from_pretrained(tmp_path / "critic" / HF_EXPORT).eval()
        critic.model.eval()
        want = token_values(critic.model, ids, mask)
        got = values(input_ids=ids, attention_mask=mask).logits[..., 0]
        assert torch.allclose(got[mask.bool()], want[mask.bool()], atol=1e-5)
    actor = ActorRollout(cfg, demo_assets["model"], total_steps=1)
    actor.save_checkpoint(str(tmp_path / "actor"))
    policy = AutoModelForCausalLM.from_pretrained(tmp_path / "actor" / HF_EXPORT)
    assert policy.config.model_type == "llama" and not os.path.exists(tmp_path / "actor" / COMPLETE)


@pytest.mark.slow
def test_fsdp2_checkpoints_export_the_gathered_full_weights(demo_assets, ray_local, tmp_path):
    """Two sharded workers: the export is the whole model (gathered to rank 0), equal to the output."""
    from safetensors.torch import load_file

    from tests.engine.test_sharding import request, run

    result, _ = run(request(demo_assets, tmp_path, "reward_model", strategy="fsdp2", steps=2))
    step = latest_checkpoint(tmp_path / "ckpt")
    assert {"model.rank0.safetensors", "model.rank1.safetensors"} <= set(os.listdir(step))
    exported = load_file(os.path.join(step, HF_EXPORT, "model.safetensors"))
    output = load_file(os.path.join(result.output_dir, "model.safetensors"))
    assert exported.keys() == output.keys() and all(torch.equal(exported[k], output[k]) for k in output)
