"""engine.models: path checks, the three heads' save/load round trips, LoRA and the reference policy."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.algos.logits import log_probs_from_logits
from engine.config import ModelConfig
from engine.data import load_rows, pad, tokenize_preference
from engine.errors import ConfigError, ModelNotAllowed
from engine.models import (
    count_parameters,
    is_lora,
    load_policy,
    load_reward_model,
    load_tokenizer,
    load_value_model,
    reference_mode,
    resolve_lora_rank,
    resolve_model_path,
    reward_scores,
    save_model,
    token_values,
)

LORA = ModelConfig(lora_rank=4, lora_alpha=8)


@pytest.fixture(scope="module")
def tok(demo_assets):
    return load_tokenizer(demo_assets["model"])


@pytest.fixture(scope="module")
def batch(demo_assets, tok):
    """Four right-padded preference sequences of different lengths: (input_ids, attention_mask)."""
    rows = load_rows(demo_assets["preference_val"], "preference")[:2]
    pairs = tokenize_preference(rows, tok, 64, "error")
    seqs = [ids for p in pairs for ids in (p.chosen_ids, p.rejected_ids[:-5])]
    ids, mask = pad(seqs, tok.pad_token_id)
    assert (mask == 0).any(), "the batch must contain padding"
    return ids, mask


def _seq_log_probs(model, ids, mask):
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    return log_probs_from_logits(logits[:, :-1], ids[:, 1:]) * mask[:, 1:]


def _train_step(model, ids, mask, lr=0.05):
    """One SGD step on a loss that touches every trainable parameter, so adapters become non-zero."""
    params = [p for p in model.parameters() if p.requires_grad]
    out = model(input_ids=ids, attention_mask=mask)
    out.logits.float().pow(2).mean().backward()
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad.sign()
            p.grad = None


def _no_pickles(root: Path) -> None:
    files = [p.name for p in root.rglob("*") if p.is_file()]
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))], files
    assert any(f.endswith(".safetensors") for f in files), files


# --- where a model may come from --------------------------------------------------------------------

@pytest.fixture
def roots(tmp_path, demo_assets):
    """allowed/ holds a model copy (config only is enough for resolving); outside/ holds another."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    for d in (allowed / "m", outside / "m", allowed / "not-a-model"):
        d.mkdir(parents=True)
    for d in (allowed / "m", outside / "m"):
        (d / "config.json").write_text("{}")
    return allowed, outside


def test_resolve_accepts_dirs_under_roots(roots):
    allowed, _ = roots
    assert resolve_model_path(str(allowed / "m"), [str(allowed)]) == os.path.realpath(allowed / "m")
    assert resolve_model_path("m", [str(allowed)]) == os.path.realpath(allowed / "m")


@pytest.mark.parametrize("name", [
    "../outside/m", "m/../../outside/m", "/etc", "/etc/passwd", "", "..", "org/../..", "a\x00b",
    "org/name/extra", "-org/x", "m/../../outside/m/",
])
def test_resolve_refuses_traversal_and_junk(roots, name):
    allowed, _ = roots
    with pytest.raises(ModelNotAllowed):
        resolve_model_path(name, [str(allowed)])


def test_resolve_refuses_outside_roots_symlinks_and_prefix_tricks(roots, tmp_path):
    allowed, outside = roots
    with pytest.raises(ModelNotAllowed):
        resolve_model_path(str(outside / "m"), [str(allowed)])
    (allowed / "link").symlink_to(outside / "m")  # inside by name, outside for real
    with pytest.raises(ModelNotAllowed):
        resolve_model_path("link", [str(allowed)])
    sibling = tmp_path / "allowed-evil" / "m"  # shares the root's string prefix
    sibling.mkdir(parents=True)
    (sibling / "config.json").write_text("{}")
    with pytest.raises(ModelNotAllowed):
        resolve_model_path(str(sibling), [str(allowed)])
    with pytest.raises(ModelNotAllowed, match="not a model directory"):
        resolve_model_path("not-a-model", [str(allowed)])
    with pytest.raises(ModelNotAllowed):
        resolve_model_path(str(allowed / "m"), [])


def test_resolve_hub_ids_but_not_local_lookalikes(roots, monkeypatch):
    allowed, outside = roots
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct", [str(allowed)]) == "Qwen/Qwen2.5-0.5B-Instruct"
    # from_pretrained("outside/m") would load the local directory relative to the working dir.
    monkeypatch.chdir(outside.parent)
    with pytest.raises(ModelNotAllowed):
        resolve_model_path("outside/m", [str(allowed)])


def test_resolve_checks_an_adapters_base(roots):
    allowed, outside = roots
    adapter = allowed / "adapter"
    adapter.mkdir()
    for base, ok in ((str(outside / "m"), False), (str(allowed / "m"), True), ("org/base", True),
                     ("../outside/m", False), (str(adapter), False)):
        (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
        if ok:
            assert resolve_model_path("adapter", [str(allowed)]) == os.path.realpath(adapter)
        else:
            with pytest.raises(ModelNotAllowed):
                resolve_model_path("adapter", [str(allowed)])


def test_loaders_check_paths_when_given_roots(demo_assets, tmp_path):
    model_dir = demo_assets["model"]
    with pytest.raises(ModelNotAllowed):
        load_policy(model_dir, ModelConfig(), allowed_roots=[str(tmp_path)])
    bad_adapter = tmp_path / "adapter"
    bad_adapter.mkdir()
    (bad_adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": model_dir}))
    (bad_adapter / "adapter_model.bin").write_bytes(b"pickle!")
    cfg = replace(LORA, lora_adapter_path=str(bad_adapter))
    with pytest.raises(ModelNotAllowed, match="safetensors"):
        load_policy(model_dir, cfg, allowed_roots=[str(Path(model_dir).parent), str(tmp_path)])


# --- tokenizer and sizes -----------------------------------------------------------------------------

def test_tokenizer_pad_and_side(tok, demo_assets, tmp_path):
    assert tok.padding_side == "right"
    assert tok.pad_token_id == 0 and tok.eos_token_id == 2 and tok.pad_token_id != tok.eos_token_id
    # A tokenizer without a pad token borrows EOS; no token is added.
    from transformers import PreTrainedTokenizerFast

    bare = PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer, eos_token="<|eos|>")
    bare.save_pretrained(tmp_path / "bare")
    loaded = load_tokenizer(str(tmp_path / "bare"))
    assert loaded.pad_token == "<|eos|>" and len(loaded) == len(tok)


def test_count_parameters_and_rank(demo_assets):
    n = count_parameters(demo_assets["model"])
    assert n == count_parameters(load_policy(demo_assets["model"], ModelConfig(), trainable=False))
    assert 100_000 < n < 5_000_000
    assert count_parameters(demo_assets["small_model"]) < n
    assert [resolve_lora_rank("auto", p) for p in (5e8, 7e9, 7e10)] == [32, 64, 128]
    assert resolve_lora_rank(8, 10**12) == 8 and resolve_lora_rank(0, 1) == 0
    with pytest.raises(ConfigError):
        resolve_lora_rank(-1, 1)


# --- the three heads round-trip -------------------------------------------------------------------

def test_policy_round_trip(demo_assets, tok, batch, tmp_path):
    from transformers import AutoModelForCausalLM

    ids, mask = batch
    policy = load_policy(demo_assets["model"], ModelConfig())
    assert policy.training and all(p.requires_grad for p in policy.parameters())
    _train_step(policy, ids, mask, lr=1e-3)
    assert save_model(policy, tok, tmp_path / "out") == "hf"
    _no_pickles(tmp_path / "out")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out", use_safetensors=True)
    policy.eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids, attention_mask=mask).logits,
                                   policy(input_ids=ids, attention_mask=mask).logits)
    assert load_tokenizer(str(tmp_path / "out")).chat_template == tok.chat_template


def test_reward_model_round_trip_matches_hf(demo_assets, tok, batch, tmp_path):
    from transformers import AutoModelForSequenceClassification

    ids, mask = batch
    torch.manual_seed(0)
    rm = load_reward_model(demo_assets["model"], ModelConfig())  # causal-LM dir: fresh score head
    assert rm.config.num_labels == 1 and rm.config.pad_token_id == tok.pad_token_id
    _train_step(rm, ids, mask, lr=1e-3)
    rm.eval()
    with torch.no_grad():
        scores = reward_scores(rm, ids, mask)
        assert scores.shape == (4,) and scores.dtype == torch.float32
        assert save_model(rm, tok, tmp_path / "rm") == "hf"
        _no_pickles(tmp_path / "rm")
        hf = AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm", use_safetensors=True)
        torch.testing.assert_close(hf(input_ids=ids, attention_mask=mask).logits.squeeze(-1), scores)
        again = load_reward_model(str(tmp_path / "rm"), ModelConfig(), trainable=False)
        torch.testing.assert_close(reward_scores(again, ids, mask), scores)
        # Robust to padding side: the same rows left-padded score the same.
        seqs = [row[m.bool()].tolist() for row, m in zip(ids, mask)]
        lids, lmask = pad(seqs, tok.pad_token_id, side="left")
        torch.testing.assert_close(reward_scores(rm, lids, lmask), scores, atol=1e-5, rtol=1e-4)


def test_value_model_round_trip(demo_assets, tok, batch, tmp_path):
    ids, mask = batch
    torch.manual_seed(1)
    critic = load_value_model(demo_assets["model"], ModelConfig(), trainable=False)
    assert not critic.training and not any(p.requires_grad for p in critic.parameters())
    with torch.no_grad():
        values = token_values(critic, ids, mask)
        assert values.shape == ids.shape and values.dtype == torch.float32
        last = mask.sum(-1) - 1
        torch.testing.assert_close(values[torch.arange(4), last], reward_scores(critic, ids, mask))
        save_model(critic, tok, tmp_path / "critic")
        again = load_value_model(str(tmp_path / "critic"), ModelConfig())
        torch.testing.assert_close(token_values(again, ids, mask) * mask, values * mask)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_dtype_and_gradient_checkpointing(demo_assets, batch, lora_rank):
    ids, mask = batch
    cfg = ModelConfig(dtype="bfloat16", enable_gradient_checkpointing=True, lora_rank=lora_rank)
    policy = load_policy(demo_assets["small_model"], cfg)
    base = policy.get_base_model() if lora_rank else policy
    # Trained weights are float32 masters (engine.runtime.precision); a frozen LoRA base is held in bf16.
    assert {p.dtype for p in policy.parameters() if p.requires_grad} == {torch.float32}
    assert {p.dtype for p in policy.parameters() if not p.requires_grad} <= {torch.bfloat16}
    assert getattr(base, "is_activation_checkpointing", None) or base.is_gradient_checkpointing
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = policy(input_ids=ids, attention_mask=mask).logits
    assert logits.dtype == torch.bfloat16
    logits.float().mean().backward()
    trainable = [p for p in policy.parameters() if p.requires_grad]
    # (LoRA's B starts at zero, so A's first gradient is zero: require every grad, and some non-zero.)
    assert trainable and all(p.grad is not None for p in trainable)
    assert sum(bool(p.grad.abs().sum() > 0) for p in trainable) >= len(trainable) // 2


# --- LoRA ----------------------------------------------------------------------------------------------

def test_lora_policy_saves_reloads_and_continues(demo_assets, tok, batch, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ids, mask = batch
    policy = load_policy(demo_assets["model"], LORA)
    assert is_lora(policy) and policy.peft_config["default"].r == 4
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    _train_step(policy, ids, mask)
    policy.eval()
    with torch.no_grad():
        want = policy(input_ids=ids, attention_mask=mask).logits
    assert save_model(policy, tok, tmp_path / "out") == "lora"
    assert is_lora(policy), "saving must not merge the model being trained"
    _no_pickles(tmp_path / "out")
    assert (tmp_path / "out" / "adapter" / "adapter_model.safetensors").is_file()
    base = AutoModelForCausalLM.from_pretrained(demo_assets["model"], use_safetensors=True)
    with torch.no_grad():
        adapted = PeftModel.from_pretrained(base, tmp_path / "out" / "adapter")
        torch.testing.assert_close(adapted(input_ids=ids, attention_mask=mask).logits, want)
        merged = AutoModelForCausalLM.from_pretrained(tmp_path / "out", use_safetensors=True)
        torch.testing.assert_close(merged(input_ids=ids, attention_mask=mask).logits, want,
                                   atol=1e-4, rtol=1e-4)
    # Continue from the adapter: same outputs, still trainable, and training moves it further.
    cont = load_policy(demo_assets["model"], replace(LORA, lora_adapter_path=str(tmp_path / "out" / "adapter")))
    assert is_lora(cont) and any(p.requires_grad for p in cont.parameters())
    cont.eval()
    with torch.no_grad():
        torch.testing.assert_close(cont(input_ids=ids, attention_mask=mask).logits, want)
    # An adapter directory given as the model loads its base, then the adapter.
    roots = [str(Path(demo_assets["model"]).parent), str(tmp_path)]
    direct = load_policy(str(tmp_path / "out" / "adapter"), ModelConfig(), trainable=False, allowed_roots=roots)
    with torch.no_grad():
        torch.testing.assert_close(direct(input_ids=ids, attention_mask=mask).logits, want)
    cont.train()
    _train_step(cont, ids, mask)
    with torch.no_grad():
        assert not torch.allclose(cont(input_ids=ids, attention_mask=mask).logits, want)


def test_reference_mode_is_base_model(demo_assets, batch):
    ids, mask = batch
    actor = load_policy(demo_assets["model"], LORA)
    _train_step(actor, ids, mask)
    base = load_policy(demo_assets["model"], ModelConfig(), trainable=False)
    actor.eval()
    with torch.no_grad():
        want = _seq_log_probs(base, ids, mask)
        with reference_mode(actor) as ref:
            torch.testing.assert_close(_seq_log_probs(ref, ids, mask), want)
        assert not torch.allclose(_seq_log_probs(actor, ids, mask), want), "adapter is back on"
    with pytest.raises(TypeError), reference_mode(base):
        pass


def test_lora_reward_model_trains_score_and_matches_hf(demo_assets, tok, batch, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    ids, mask = batch
    torch.manual_seed(2)
    rm = load_reward_model(demo_assets["model"], ModelConfig(lora_rank="auto"))
    assert rm.peft_config["default"].r == 32  # "auto" for a model under 1B parameters
    trainable = [n for n, p in rm.named_parameters() if p.requires_grad]
    assert any("score" in n for n in trainable) and any("lora_" in n for n in trainable)
    _train_step(rm, ids, mask)
    rm.eval()
    with torch.no_grad():
        want = reward_scores(rm, ids, mask)
        assert save_model(rm, tok, tmp_path / "rm") == "lora"
        hf = AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm", use_safetensors=True)
        torch.testing.assert_close(hf(input_ids=ids, attention_mask=mask).logits.squeeze(-1), want,
                                   atol=1e-4, rtol=1e-4)
        base = AutoModelForSequenceClassification.from_pretrained(
            demo_assets["model"], num_labels=1, pad_token_id=tok.pad_token_id, use_safetensors=True)
        adapted = PeftModel.from_pretrained(base, tmp_path / "rm" / "adapter")
        torch.testing.assert_close(adapted(input_ids=ids, attention_mask=mask).logits.squeeze(-1), want)


@pytest.mark.parametrize("packed", [True, False])
def test_reward_scores_read_where_hf_reads_when_pad_is_eos(demo_assets, tok, packed, tmp_path):
    """With pad == eos, Hugging Face scores the token before a trailing eos: so does Keel, packed or not."""
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    rm = load_reward_model(demo_assets["model"], ModelConfig(use_remove_padding=packed))
    eos = tok.eos_token_id
    rm.config.pad_token_id = eos
    rows = load_rows(demo_assets["preference_val"], "preference")[:3]
    seqs = [tok(r["prompt"] + r["chosen"])["input_ids"][:20 + 5 * i] + [eos] for i, r in enumerate(rows)]
    ids, mask = pad(seqs, eos)
    rm.eval()
    with torch.no_grad():
        scores = reward_scores(rm, ids, mask)
        save_model(rm, tok, tmp_path / "rm")
        hf = AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm", use_safetensors=True)
        assert hf.config.pad_token_id == eos
        torch.testing.assert_close(hf(input_ids=ids, attention_mask=mask).logits.squeeze(-1), scores,
                                   atol=1e-5, rtol=1e-4)
