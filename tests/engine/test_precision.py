"""Mixed precision (`engine.runtime.precision`): float32 master weights, bf16/fp16 compute, loss scaling."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch
from safetensors.torch import load_file

from engine.config import ModelConfig, OptimConfig
from engine.errors import Cancelled
from engine.methods.reward_model import run_reward_model
from engine.methods.sft import run_sft
from engine.models import load_policy, load_reward_model
from engine.runtime.checkpoint import latest_checkpoint
from engine.runtime.precision import Precision, compute_dtype
from engine.runtime.reporting import RecordingReporter
from engine.schedule import build_optimizer
from tests.engine.test_reward_model import rm_request
from tests.engine.test_roles import _train_batch, config, rollout
from tests.engine.test_sft import sft_request

pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (tests/engine/conftest.py)


def changed_share(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor],
                  touched: dict[str, torch.Tensor]) -> float:
    """Share of the trained elements that received a gradient (`touched`) whose value changed.

    Rows of an untied embedding whose tokens never occur get no gradient and cannot move in any
    dtype, so they are not counted."""
    changed = total = 0
    for name, mask in touched.items():
        changed += int((after[name].float() != before[name].float())[mask].sum())
        total += int(mask.sum())
    assert total > 0
    return changed / total


def test_compute_dtype_and_config_values():
    assert compute_dtype("float32") == torch.float32
    assert compute_dtype("bfloat16") == torch.bfloat16
    assert compute_dtype("float16") == torch.float16
    with pytest.raises(ValueError):
        compute_dtype("int8")
    assert Precision("float16", "cpu").scaler is not None
    assert Precision("bfloat16", "cpu").scaler is None


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_trained_weights_are_float32_and_forwards_run_in_the_compute_dtype(demo_assets, dtype):
    model = load_policy(demo_assets["model"], ModelConfig(dtype=dtype))
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    frozen = load_policy(demo_assets["model"], ModelConfig(dtype=dtype), trainable=False)
    assert {p.dtype for p in frozen.parameters()} == {compute_dtype(dtype)}
    ids = torch.tensor([[1, 5, 9, 12]])
    with Precision(dtype, "cpu").autocast():
        logits = model(input_ids=ids).logits
    assert logits.dtype == compute_dtype(dtype)


def test_lora_base_in_compute_dtype_adapters_and_score_head_float32(demo_assets):
    model = load_reward_model(demo_assets["model"], ModelConfig(dtype="bfloat16", lora_rank=4))
    trained = {n: p.dtype for n, p in model.named_parameters() if p.requires_grad}
    assert trained and set(trained.values()) == {torch.float32}
    assert any("score" in n for n in trained)
    frozen = {p.dtype for p in model.parameters() if not p.requires_grad}
    assert frozen == {torch.bfloat16}


def test_bf16_actor_learns_at_the_default_lr(demo_assets):
    """At the actor's lr 1e-6, every weight that gets a gradient moves with float32 masters; with
    bf16 parameters (the old behaviour, rebuilt here as the control) almost none does."""
    from engine.data import load_rows, tokenize_prompts
    from engine.models import load_tokenizer
    from engine.roles.actor import ActorRollout
    from tests.engine.test_roles import prompts  # noqa: F401

    tokenizer = load_tokenizer(demo_assets["model"])
    rows = load_rows(demo_assets["prompts_train"], "prompts")[:4]
    prompt_ids = tokenize_prompts(rows, tokenizer, 32, "error")
    cfg = config(actor={"ppo_mini_batch_size": 4, "ppo_epochs": 1, "optim": {"lr": 1e-6}},
                 model={"dtype": "bfloat16"})
    assert cfg.actor.optim.lr == 1e-6

    def run(role):
        batch = _train_batch(role, rollout(role, prompt_ids))
        batch.pop("policy_version")  # the same rows train three updates: no rollout follows each one
        before = {n: p.detach().clone() for n, p in role.model.named_parameters() if p.requires_grad}
        for _ in range(3):
            assert not role.update_actor(batch, [4])["nonfinite"]
        after = {n: p.detach() for n, p in role.model.named_parameters() if p.requires_grad}
        index = {id(p): i for i, p in enumerate(role._params())}
        state = role.optimizer.state
        touched = {n: state[p]["exp_avg_sq"] > 0 for n, p in role.model.named_parameters() if p.requires_grad
                   and id(p) in index}
        return changed_share(before, after, touched)

    role = ActorRollout(cfg, demo_assets["model"], total_steps=10)
    assert {p.dtype for p in role._params()} == {torch.float32}
    assert run(role) >= 0.99

    control = ActorRollout(cfg, demo_assets["model"], total_steps=10)
    control.model.to(torch.bfloat16)  # parameters in bf16, no master copy
    control.optimizer = build_optimizer(control.model, OptimConfig(lr=1e-6))
    control._init_grads()
    assert run(control) < 0.5


def test_bf16_sft_changes_every_trained_weight_after_three_steps(demo_assets, tmp_path):
    request = sft_request(demo_assets, tmp_path, steps=3, config={
        "optim": {"lr": 1e-6}, "model": {"dtype": "bfloat16"}, "trainer": {"save_freq": 3}})
    run_sft(request, RecordingReporter())
    ckpt = latest_checkpoint(request.checkpoint_dir)
    after = load_file(os.path.join(ckpt, "model.safetensors"))
    assert {v.dtype for v in after.values()} == {torch.float32}  # the masters are checkpointed
    before = load_file(os.path.join(demo_assets["model"], "model.safetensors"))
    optim = torch.load(os.path.join(ckpt, "model.optim.pt"), weights_only=True)
    names = [n for n, p in load_policy(demo_assets["model"], ModelConfig()).named_parameters() if p.requires_grad]
    touched = {n: optim["state"][i]["exp_avg_sq"] > 0 for i, n in enumerate(names)}
    assert changed_share(before, after, touched) >= 0.99
    # The output is written in the compute dtype, like the model the job started from.
    out = load_file(os.path.join(request.output_dir, "model.safetensors"))
    assert {v.dtype for v in out.values()} == {torch.bfloat16}
    with open(os.path.join(request.output_dir, "config.json")) as f:
        assert json.load(f)["dtype"] == "bfloat16"


def _relative_gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


@pytest.mark.slow
def test_bf16_loss_curves_follow_float32(demo_assets, tmp_path):
    """30 steps of SFT and of reward-model training: the bf16 loss stays within 5% of fp32's."""
    curves = {}
    for dtype in ("float32", "bfloat16"):
        sft = RecordingReporter()
        run_sft(sft_request(demo_assets, tmp_path / f"sft-{dtype}", steps=30,
                            config={"model": {"dtype": dtype}, "optim": {"lr": 1e-3}}), sft)
        rm = RecordingReporter()
        run_reward_model(rm_request(demo_assets, tmp_path / f"rm-{dtype}", steps=30,
                                    config={"model": {"dtype": dtype}, "optim": {"lr": 3e-4}}), rm)
        curves[dtype] = (sft.series("train/loss"), rm.series("rm/loss"))
    (sft32, rm32), (sft16, rm16) = curves["float32"], curves["bfloat16"]
    assert len(sft16) == len(rm16) == 30
    assert sft32[-1] < 0.7 * sft32[0] and rm32[-1] < 0.7 * rm32[0]  # both learned something
    assert _relative_gap(sft16, sft32) < 0.05
    assert _relative_gap(rm16, rm32) < 0.05


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_resume_is_exact(demo_assets, tmp_path, dtype):
    config = {"model": {"dtype": dtype}, "trainer": {"save_freq": 2}}
    full = sft_request(demo_assets, tmp_path / "full", steps=4, config=config)
    run_sft(full, RecordingReporter())
    cut = sft_request(demo_assets, tmp_path / "cut", steps=4, config=config)
    with pytest.raises(Cancelled):
        run_sft(cut, RecordingReporter(stop_after_step=2))
    scaler_file = os.path.join(latest_checkpoint(cut.checkpoint_dir), "scaler.sched.pt")
    assert os.path.isfile(scaler_file) == (dtype == "float16")
    run_sft(dataclasses.replace(cut, resume_from=cut.checkpoint_dir), RecordingReporter())
    a = load_file(os.path.join(full.checkpoint_dir, "step_4", "model.safetensors"))
    b = load_file(os.path.join(cut.checkpoint_dir, "step_4", "model.safetensors"))
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_float16_overflow_skips_the_step_but_a_nan_loss_is_a_failure():
    layer = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-2)
    precision = Precision("float16", "cpu")
    before = layer.weight.detach().clone()
    with precision.autocast():
        loss = layer(torch.full((2, 4), 100.0)).sum()
    precision.backward(loss)  # 65536 x ~200 overflows float16's 65504
    _, stepped, nonfinite = precision.step(optimizer, layer.parameters(), 1.0)
    assert not stepped and not nonfinite
    assert torch.equal(layer.weight, before)
    assert precision.state_dict()["scale"] < 65536.0
    optimizer.zero_grad()
    with precision.autocast():
        loss = layer(torch.ones(2, 4)).sum() * float("nan")
    precision.backward(loss)
    _, stepped, nonfinite = precision.step(optimizer, layer.parameters(), 1.0)
    assert not stepped and nonfinite
