"""What a PPO update step costs: no dropout in updates, logits at response positions only, entropy
only when it is a loss term, one forward after the update for the guardrail KL, fused AdamW, snapshots."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from engine.config import ModelConfig, OptimConfig
from engine.models import disable_dropout, load_policy
from engine.schedule import build_optimizer
from tests.engine.test_roles import _train_batch, config, rollout

pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (tests/engine/conftest.py)


@pytest.fixture(scope="module")
def prompts(demo_assets):
    from engine.data import load_rows, tokenize_prompts
    from engine.models import load_tokenizer

    rows = load_rows(demo_assets["prompts_train"], "prompts")[:4]
    return tokenize_prompts(rows, load_tokenizer(demo_assets["model"]), 32, "error")


@pytest.fixture(scope="module")
def dropout_model(demo_assets, tmp_path_factory):
    """The demo Llama with attention dropout 0.5 in its config."""
    path = tmp_path_factory.mktemp("dropout-model")
    shutil.copytree(demo_assets["model"], path, dirs_exist_ok=True)
    cfg = json.loads((path / "config.json").read_text())
    cfg["attention_dropout"] = 0.5
    (path / "config.json").write_text(json.dumps(cfg))
    return str(path)


def one_mini_batch(**actor) -> dict:
    return {"ppo_mini_batch_size": 4, "ppo_epochs": 1, **actor}


def test_dropout_is_off_in_updates_so_the_first_ratio_is_one(dropout_model, prompts):
    from engine.roles.actor import ActorRollout

    role = ActorRollout(config(actor=one_mini_batch()), dropout_model, total_steps=10)
    assert role.model.training  # train mode otherwise kept
    assert all(m.attention_dropout == 0.0 for m in role.model.modules() if hasattr(m, "attention_dropout"))
    batch = _train_batch(role, rollout(role, prompts[:4]))
    old = batch["old_log_probs"].clone()
    out = role.update_actor(batch, [4])
    metrics = {k: s / w for k, (s, w) in out["metrics"].items()}
    # Before any step the update's log-probs are the rollout's: ratio 1 exactly.
    assert metrics["actor/ppo_kl"] == 0.0 and metrics["actor/pg_clipfrac"] == 0.0
    # The guardrail's log-probs come after the step: no longer the rollout's.
    assert not torch.equal(out["log_probs"], old)


def test_disable_dropout_zeroes_modules_and_attention_probabilities(dropout_model):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(dropout_model)
    model.lm_head = torch.nn.Sequential(torch.nn.Dropout(0.3), model.lm_head)
    assert disable_dropout(model) == 2 + model.config.num_hidden_layers - 1  # 1 Dropout + 2 attention layers
    model.train()
    ids = torch.tensor([[1, 5, 9, 12, 30]])
    torch.testing.assert_close(model(input_ids=ids).logits, model(input_ids=ids).logits, rtol=0, atol=0)
    assert model.config.attention_dropout == 0.5  # the saved config keeps the model's own setting


def test_lm_head_sees_only_response_positions(demo_assets, prompts):
    from engine.roles.actor import ActorRollout

    role = ActorRollout(config(actor=one_mini_batch()), demo_assets["model"], total_steps=10)
    batch = _train_batch(role, rollout(role, prompts[:4]))
    seen: list[torch.Size] = []
    handle = role.model.lm_head.register_forward_hook(lambda m, args, out: seen.append(args[0].shape))
    try:
        role.compute_log_prob(batch)
        role.update_actor(batch, [4])
    finally:
        handle.remove()
    response_width = int(batch["response_mask"].sum(-1).max())
    sequence_width = int(batch["attention_mask"].sum(-1).max())
    # compute_log_prob, the update's forward, and the forward after its step (the guardrail's).
    assert len(seen) == 3 and response_width < sequence_width
    assert all(shape[1] == response_width for shape in seen), seen


def test_logits_at_equals_the_full_forward(demo_assets):
    from engine.models import logits_at

    model = load_policy(demo_assets["model"], ModelConfig(lora_rank=4)).eval()
    ids = torch.randint(3, model.config.vocab_size, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    positions = torch.tensor([[2, 3, 4], [5, 6, 8], [0, 10, 11]])
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask).logits
        picked = logits_at(model, ids, mask, positions)
    expected = full.gather(1, positions[..., None].expand(-1, -1, full.shape[-1]))
    torch.testing.assert_close(picked, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("coeff", [0.0, 0.01])
def test_entropy_only_computed_when_it_is_a_loss_term(demo_assets, prompts, monkeypatch, coeff):
    from engine.roles import forward
    from engine.roles.actor import ActorRollout

    calls: list[bool] = []
    real = forward.log_probs_and_entropy

    def counting(logits, labels, **kw):
        out = real(logits, labels, **kw)
        calls.append(out[1].requires_grad)
        return out

    monkeypatch.setattr(forward, "log_probs_and_entropy", counting)
    # 2 epochs x 2 mini-batches x 1 micro-batch each.
    role = ActorRollout(config(actor={"entropy_coeff": coeff}), demo_assets["model"], total_steps=10)
    batch = _train_batch(role, rollout(role, prompts[:4]))
    calls.clear()
    out = role.update_actor(batch, [2, 2])
    if coeff:
        assert calls == [True] * 4  # every forward, in the graph
    else:
        assert calls == [False] * 2  # the last epoch only, detached: the metric
    assert "actor/entropy" in out["metrics"]


def test_guardrail_log_probs_come_from_one_forward_after_the_last_step(demo_assets, prompts):
    from engine.roles.actor import ActorRollout

    role = ActorRollout(config(), demo_assets["model"], total_steps=10)  # 2 epochs x 2 mini-batches
    batch = _train_batch(role, rollout(role, prompts[:4]))
    forwards: list[int] = []
    backbone = role.model.model
    handle = backbone.register_forward_pre_hook(lambda m, args, kwargs: forwards.append(1), with_kwargs=True)
    captured: list[torch.Tensor] = []
    original = role._backward

    def capture(mb, total, width, sums, *, last_epoch):
        log_probs = original(mb, total, width, sums, last_epoch=last_epoch)
        if last_epoch:
            captured.append(log_probs)
        return log_probs

    role._backward = capture
    try:
        out = role.update_actor(batch, [2, 2])
    finally:
        handle.remove()
    assert len(forwards) == 5  # ppo_epochs x micro-batches, then one pass under the updated weights
    last_epoch = torch.cat([torch.nn.functional.pad(lp, (0, out["log_probs"].shape[1] - lp.shape[1]))
                            for lp in captured])
    mask = batch["response_mask"].bool()
    # The last epoch's forwards ran before its steps: they are not the policy the update produced.
    assert not torch.equal(out["log_probs"][mask], last_epoch[mask])
    batch.pop("policy_version")
    torch.testing.assert_close(out["log_probs"][mask], role.compute_log_prob(batch)["log_probs"][mask], rtol=0,
                               atol=1e-6)


def test_adamw_is_fused_on_plain_cpu_parameters(demo_assets):
    model = load_policy(demo_assets["model"], ModelConfig())
    optimizer = build_optimizer(model, OptimConfig())
    assert optimizer.defaults["fused"] is True and not optimizer.defaults["foreach"]
    # Its step is AdamW's: the same update as the reference loop, to float rounding.
    reference = load_policy(demo_assets["model"], ModelConfig())
    plain = torch.optim.AdamW([p for p in reference.parameters() if p.requires_grad], lr=OptimConfig().lr,
                              betas=tuple(OptimConfig().betas), weight_decay=OptimConfig().weight_decay,
                              foreach=False)
    for mine, theirs in zip((p for p in model.parameters() if p.requires_grad),
                            (p for p in reference.parameters() if p.requires_grad), strict=True):
        mine.grad = torch.full_like(mine, 0.01)
        theirs.grad = torch.full_like(theirs, 0.01)
    for _ in range(3):
        optimizer.step()
        plain.step()
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-7)
    assert not torch.equal(next(model.parameters()), next(load_policy(demo_assets["model"], ModelConfig()).parameters()))


def test_snapshot_reuses_its_buffers_and_restores_exactly(demo_assets, prompts):
    from engine.roles.actor import ActorRollout

    role = ActorRollout(config(), demo_assets["model"], total_steps=10)
    batch = _train_batch(role, rollout(role, prompts[:4]))
    batch.pop("policy_version")  # the same rows train every update here: no rollout between them
    role.update_actor(batch, [2, 2])  # Adam state exists from here on
    role.snapshot()
    first = {k: v.data_ptr() for k, v in role._snapshot["tensors"].items()}
    role.update_actor(batch, [2, 2])
    role.snapshot()  # copied into the previous buffers: nothing allocated
    assert {k: v.data_ptr() for k, v in role._snapshot["tensors"].items()} == first
    params = {k: v.detach().clone() for k, v in role.model.named_parameters()}
    moments = [s["exp_avg"].clone() for s in role.optimizer.state.values()]
    role.update_actor(batch, [2, 2])
    assert any(not torch.equal(v, params[k]) for k, v in role.model.named_parameters())
    role.restore()
    for name, value in role.model.named_parameters():
        assert torch.equal(value, params[name]), name
    for before, state in zip(moments, role.optimizer.state.values(), strict=True):
        assert torch.equal(before, state["exp_avg"])
