"""Interactive trainer sessions' saved states (loaded by plain transformers / peft, restored exactly,
read only from allowed places), bad input that changes nothing, and bfloat16 compute on float32
masters."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file
from trainer_sessions import SEED, make, max_diff, prompt_ids, weights_of

from engine.errors import ConfigError, DataError, ModelNotAllowed
from engine.runtime.checkpoint import CheckpointError

pytestmark = pytest.mark.usefixtures("one_thread")


# --- states --------------------------------------------------------------------------------------------

def test_save_state_is_a_model_plain_transformers_loads(demo_assets, tmp_path, sft_datums):
    from transformers import AutoModelForCausalLM

    session = make(demo_assets, tmp_path)
    data = sft_datums(3)
    session.run("forward_backward", {"data": data, "loss_fn": "cross_entropy"})
    session.run("optim_step", {"adam_params": {"learning_rate": 1e-2}})
    saved = session.run("save_state", {"name": "after-one"})
    assert saved == {"path": str(tmp_path / "state" / "weights" / "after-one"), "step": 1, "format": "hf",
                     "tokens": 0}
    assert os.path.isfile(os.path.join(saved["path"], "trainer", "optim.optim.pt"))
    loaded = AutoModelForCausalLM.from_pretrained(saved["path"]).eval()
    ids = data[0]["model_input"]
    with torch.no_grad():
        theirs = loaded(input_ids=torch.tensor([ids])).logits[0]
        mine = session.model(input_ids=torch.tensor([ids])).logits[0]
        base = AutoModelForCausalLM.from_pretrained(demo_assets["model"])(input_ids=torch.tensor([ids])).logits[0]
    assert torch.allclose(theirs, mine, atol=1e-5) and not torch.allclose(theirs, base, atol=1e-3)


def test_lora_state_loads_with_peft_and_the_lora_knobs_apply(demo_assets, tmp_path, sft_datums):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    session = make(demo_assets, tmp_path, lora_rank=4, lora_alpha=8, target_modules=("q_proj", "v_proj"))
    assert all(p.requires_grad == ("lora_" in n) for n, p in session.model.named_parameters())
    lora_layers = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in session.model.named_parameters()
                   if "lora_A" in n}
    assert lora_layers == {"q_proj", "v_proj"}
    session.run("forward_backward", {"data": sft_datums(3), "loss_fn": "cross_entropy"})
    session.run("optim_step", {"adam_params": {"learning_rate": 1e-2}})
    saved = session.run("save_state", {"name": "lora"})
    assert saved["format"] == "lora"
    with open(os.path.join(saved["path"], "adapter", "adapter_config.json")) as f:
        config = json.load(f)
    assert (config["r"], config["lora_alpha"], sorted(config["target_modules"])) == (4, 8, ["q_proj", "v_proj"])
    assert set(load_file(os.path.join(saved["path"], "trainer", "model.safetensors"))) == {
        n for n, p in session.model.named_parameters() if p.requires_grad}  # only the adapter is kept there
    base = AutoModelForCausalLM.from_pretrained(demo_assets["model"])
    adapted = PeftModel.from_pretrained(base, os.path.join(saved["path"], "adapter")).eval()
    merged = AutoModelForCausalLM.from_pretrained(saved["path"]).eval()
    ids = torch.tensor([sft_datums(1)[0]["model_input"]])
    with torch.no_grad():
        mine = session.model(input_ids=ids).logits
        assert torch.allclose(adapted(input_ids=ids).logits, mine, atol=1e-5)
        assert torch.allclose(merged(input_ids=ids).logits, mine, atol=1e-4)
        with session.model.disable_adapter():
            assert not torch.allclose(session.model(input_ids=ids).logits, mine, atol=1e-3)


def test_load_state_continues_exactly(demo_assets, tmp_path, sft_datums):
    batches = [sft_datums(2, offset=2 * i) for i in range(4)]
    adam = {"learning_rate": 5e-3, "grad_clip_norm": 1.0, "weight_decay": 0.1}

    def train(session, steps):
        for batch in steps:
            session.run("forward_backward", {"data": batch, "loss_fn": "cross_entropy"})
            session.run("optim_step", {"adam_params": adam})

    straight = make(demo_assets, tmp_path, lora_rank=4)
    train(straight, batches)
    first = make(demo_assets, tmp_path, lora_rank=4)
    train(first, batches[:2])
    first.run("forward_backward", {"data": batches[2], "loss_fn": "cross_entropy"})  # pending: not kept
    path = first.run("save_state", {"name": "mid"})["path"]
    second = make(demo_assets, tmp_path, lora_rank=4, seed=SEED + 1)  # another adapter init: the state overrides it
    assert second.run("load_state", {"path": path}) == {"step": 2, "tokens": 0}
    train(second, batches[2:])
    assert second.step == 4 and max_diff(weights_of(second), weights_of(straight)) < 1e-6
    # without the optimizer state, AdamW starts afresh: another result
    third = make(demo_assets, tmp_path, lora_rank=4)
    third.run("load_state", {"path": path, "optimizer": False})
    train(third, batches[2:])
    assert max_diff(weights_of(third), weights_of(straight)) > 1e-5


def test_sampler_snapshot_keeps_the_weights_it_was_saved_with(demo_assets, tmp_path, sft_datums):
    session = make(demo_assets, tmp_path)
    prompts = prompt_ids(session)[:2]
    params = {"max_tokens": 10, "seed": 4}
    before = session.run("sample", {"prompts": prompts, "sampling_params": params})
    snapshot = session.run("save_weights_for_sampler", {"name": "v0"})
    assert snapshot == {"path": str(tmp_path / "state" / "sampler_weights" / "v0"), "tokens": 0}
    assert not os.path.exists(os.path.join(snapshot["path"], "trainer"))  # weights only
    for _ in range(3):
        session.run("forward_backward", {"data": sft_datums(4), "loss_fn": "cross_entropy"})
        session.run("optim_step", {"adam_params": {"learning_rate": 2e-2}})
    now = session.run("sample", {"prompts": prompts, "sampling_params": params})
    old = session.run("sample", {"prompts": prompts, "sampling_params": params, "sampler_path": snapshot["path"]})
    strip = [[{k: v for k, v in s.items() if k != "logprobs"} for s in r["sequences"]] for r in (before, now, old)]
    assert strip[2] == strip[0] and strip[1] != strip[0]
    for a, b in zip(old["sequences"], before["sequences"]):
        assert a["logprobs"] == pytest.approx(b["logprobs"], abs=1e-5)


# --- what changes nothing -------------------------------------------------------------------------------

def test_bad_input_changes_nothing(demo_assets, tmp_path, sft_datums):
    session = make(demo_assets, tmp_path)
    data = sft_datums(3)
    before = weights_of(session)
    vocab = session.vocab_size
    bad = [dict(d) for d in data]
    bad[2] = {"model_input": data[2]["model_input"], "loss_fn_inputs": {
        **data[2]["loss_fn_inputs"], "target_tokens": data[2]["loss_fn_inputs"]["target_tokens"][:-1] + [vocab]}}
    with pytest.raises(DataError) as info:
        session.run("forward_backward", {"data": bad, "loss_fn": "cross_entropy"})
    assert info.value.param == "data[2].loss_fn_inputs.target_tokens"
    assert all(p.grad is None for p in session.params)  # the valid datums before it left no gradient
    too_long = [{"model_input": [5] * 600, "loss_fn_inputs": {"target_tokens": [5] * 600, "weights": [1.0] * 600}}]
    with pytest.raises(DataError) as info:
        session.run("forward_backward", {"data": too_long, "loss_fn": "cross_entropy"})
    assert info.value.param == "data[0].model_input"
    with pytest.raises(ConfigError) as info:
        session.run("sample", {"prompts": ["hi"], "sampling_params": {"max_tokens": 512}})
    assert info.value.param == "sampling_params.max_tokens" and session.sample_calls == 0
    with pytest.raises(ConfigError) as info:
        session.run("optim_step", {"adam_params": {"learning_rate": 1e-3, "beta2": 1.5}})
    assert info.value.param == "adam_params.beta2" and session.step == 0 and session.optimizer is None
    assert max_diff(weights_of(session), before) == 0.0


def test_states_are_read_only_from_allowed_places(demo_assets, tmp_path):
    session = make(demo_assets, tmp_path, lora_rank=4)
    saved = session.run("save_state", {"name": "mine"})["path"]
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(saved, elsewhere)
    link = tmp_path / "state" / "weights" / "link"  # inside the root, pointing out of it
    os.symlink(elsewhere, link)
    for outside in (elsewhere, link):
        with pytest.raises(ConfigError) as info:
            session.run("load_state", {"path": str(outside)})
        assert info.value.param == "path"
        with pytest.raises(ConfigError) as info:
            session.run("sample", {"prompts": ["hi"], "sampler_path": str(outside)})
        assert info.value.param == "sampler_path"
    with pytest.raises(ModelNotAllowed) as info:  # the model itself must lie under a model root
        make(demo_assets, tmp_path, lora_rank=4, allowed_roots=(str(elsewhere),))
    assert info.value.param == "model"
    models_root = os.path.dirname(demo_assets["model"])
    allowed = make(demo_assets, tmp_path, lora_rank=4, allowed_roots=(models_root, str(elsewhere)))
    assert allowed.run("load_state", {"path": str(elsewhere)})["step"] == 0  # a model root is readable
    with pytest.raises(ConfigError) as info:
        session.run("load_state", {"path": str(tmp_path / "state" / "weights" / "missing")})
    assert info.value.param == "path"
    os.makedirs(tmp_path / "state" / "weights" / "empty")
    with pytest.raises(CheckpointError) as info:
        session.run("load_state", {"path": str(tmp_path / "state" / "weights" / "empty")})
    assert info.value.param == "path"
    full = make(demo_assets, tmp_path)  # another adapter configuration: refused, not half-loaded
    with pytest.raises(ConfigError) as info:
        full.run("load_state", {"path": saved})
    assert info.value.param == "path" and full.step == 0
    no_root = make(demo_assets, tmp_path, state_root="")
    with pytest.raises(ConfigError) as info:
        no_root.run("save_state", {"name": "x"})
    assert info.value.param == "state_root"


def test_bfloat16_computes_in_bfloat16_on_float32_masters(demo_assets, tmp_path, sft_datums):
    exact = make(demo_assets, tmp_path)
    low = make(demo_assets, tmp_path, dtype="bfloat16")
    data = sft_datums(2)
    a = exact.run("forward", {"data": data, "loss_fn": "cross_entropy"})["loss_fn_outputs"][0]["logprobs"]
    b = low.run("forward", {"data": data, "loss_fn": "cross_entropy"})["loss_fn_outputs"][0]["logprobs"]
    assert a != b and max(abs(x - y) for x, y in zip(a, b)) < 0.2
    assert all(p.dtype == torch.float32 for p in low.params)
    with pytest.raises(ConfigError) as info:
        make(demo_assets, tmp_path, dtype="float64")
    assert info.value.param == "dtype"
