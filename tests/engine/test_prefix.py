"""engine.rollout.prefix: response logits with each distinct prompt run once equal the per-row forward's,
and the roles' micro-batches keep a prompt's rows together when they use it."""

from __future__ import annotations

import pytest
import torch

from engine.config import PPOConfig, build_config
from engine.data import load_rows, tokenize_prompts
from engine.models import logits_at, reference_mode
from engine.roles.batch import build_batch, response_positions, trim
from engine.rollout import prefix

CFG = {
    "data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
    "actor": {"ppo_mini_batch_size": 4, "ppo_epochs": 1, "ppo_max_token_len_per_gpu": 4096,
              "use_kl_loss": True, "kl_loss_type": "low_var_kl", "optim": {"lr": 1e-3}},
    "rollout": {"n": 3},
}


def config(**model) -> PPOConfig:
    return build_config(PPOConfig, {**CFG, "model": model})


@pytest.fixture(scope="module")
def prompt_ids(demo_assets):
    from engine.models import load_tokenizer

    tokenizer = load_tokenizer(demo_assets["model"])
    rows = load_rows(demo_assets["prompts_train"], "prompts")[:4]
    return [p.prompt_ids for p in tokenize_prompts(rows, tokenizer, 32, "error")]


def grouped_batch(prompt_ids, n=3, vocab=800, seed=0):
    """`n` rows per prompt with responses of varied lengths (some padded), rows of a group adjacent."""
    gen = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for p in prompt_ids:
        for _ in range(n):
            length = int(torch.randint(1, 9, (1,), generator=gen))
            prompts.append(p)
            responses.append(torch.randint(3, vocab, (length,), generator=gen).tolist())
    return build_batch(prompts, responses, prompt_width=32, response_width=8, pad_id=0)


def reference_logits(model, batch):
    positions = response_positions(batch["prompt_lens"], batch["responses"].shape[1], batch["input_ids"].shape[1])
    return logits_at(model, batch["input_ids"], batch["attention_mask"], positions)


@pytest.mark.parametrize("lora", [False, True])
def test_shared_prompt_logits_and_gradients_equal_the_per_row_forward(demo_assets, prompt_ids, lora):
    from engine.models import load_policy

    torch.manual_seed(0)
    cfg = config(**({"lora_rank": 4, "lora_alpha": 8} if lora else {}))
    model = load_policy(demo_assets["model"], cfg.model, trainable=True)
    if lora:  # a fresh adapter is the identity (B = 0): give it weights so it changes the logits
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.5)
    assert prefix.supports(model)
    batch = trim(grouped_batch(prompt_ids))
    mask = batch["response_mask"].bool()
    assert len(prefix.row_groups(batch["input_ids"], batch["prompt_lens"])) < len(batch["prompt_lens"])
    every_third = prefix.row_groups(batch["input_ids"][::3], batch["prompt_lens"][::3])
    assert len(every_third) == len(batch["prompt_lens"][::3])  # no two rows share a prompt
    params = [p for p in model.parameters() if p.requires_grad]
    expected = reference_logits(model, batch)
    got = prefix.response_logits(model, batch["input_ids"], batch["prompt_lens"], batch["responses"])
    assert got.shape == expected.shape
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-5, rtol=1e-5)
    weights = torch.randn(expected[mask].shape, generator=torch.Generator().manual_seed(1))
    g_expected = torch.autograd.grad((expected[mask] * weights).sum(), params)
    g_got = torch.autograd.grad((got[mask] * weights).sum(), params)
    for a, b in zip(g_got, g_expected, strict=True):  # float32 sums in another order
        assert float((a - b).norm()) <= 1e-5 * float(b.norm())
    if lora:  # the reference policy (adapter disabled) goes through the same path
        with torch.no_grad(), reference_mode(model):
            base = reference_logits(model, batch)
            shared = prefix.response_logits(model, batch["input_ids"], batch["prompt_lens"], batch["responses"])
        torch.testing.assert_close(shared[mask], base[mask], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(base[mask], expected[mask], atol=1e-3)


def test_shared_prompt_logits_with_groups_not_adjacent(demo_assets, prompt_ids):
    from engine.models import load_policy

    model = load_policy(demo_assets["model"], config().model, trainable=False)
    batch = grouped_batch(prompt_ids, seed=4)
    order = [5, 0, 7, 1, 2, 9, 3, 4, 6, 8, 11]  # interleaved, and one group short of a row
    batch = trim({k: v[order] for k, v in batch.items()})
    mask = batch["response_mask"].bool()
    with torch.no_grad():
        expected = reference_logits(model, batch)
        got = prefix.response_logits(model, batch["input_ids"], batch["prompt_lens"], batch["responses"])
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-5, rtol=1e-5)


def test_not_used_under_gradient_checkpointing_or_training_dropout(demo_assets):
    from engine.models import load_policy

    model = load_policy(demo_assets["model"], config(enable_gradient_checkpointing=True).model, trainable=True)
    assert not prefix.supports(model)
    model = load_policy(demo_assets["model"], config().model, trainable=True)
    assert prefix.supports(model)
    attn = model.model.layers[0].self_attn
    attn.attention_dropout = 0.1
    assert not prefix.supports(model)
    model.eval()  # dropout does nothing in eval mode (the reference pass)
    assert prefix.supports(model)


def test_row_groups_and_shared_micro_batches(demo_assets, prompt_ids):
    from engine.models import load_policy
    from engine.roles.forward import iter_micro_batches

    model = load_policy(demo_assets["model"], config().model, trainable=False)
    batch = grouped_batch(prompt_ids)
    order = [5, 0, 7, 1, 2, 9, 3, 4, 6, 8, 10, 11]  # groups interleaved
    shuffled = {k: v[order] for k, v in batch.items()}
    groups = prefix.row_groups(shuffled["input_ids"], shuffled["prompt_lens"])
    assert sorted(sorted(order[i] // 3 for i in g) for g in groups) == [[k] * 3 for k in range(4)]
    lengths = batch["attention_mask"].sum(-1).tolist()
    lens = batch["prompt_lens"].tolist()
    shared_cost = [lens[3 * k] + sum(lengths[i] - lens[i] for i in range(3 * k, 3 * k + 3)) for k in range(4)]
    budget = shared_cost[0] + shared_cost[1]  # room for two groups counted once, not for six rows
    assert budget < sum(lengths[:6])
    rows = list(range(12))
    micro = list(iter_micro_batches(batch, rows, dynamic=True, max_tokens=budget, size=2,
                                    device=torch.device("cpu"), packed=True, model=model))
    seen = sorted(i for index, _ in micro for i in index)
    assert seen == rows
    for index, _ in micro:
        assert all(sum(i // 3 == k for i in index) in (0, 3) for k in range(4))  # whole groups only
        assert sum(shared_cost[k] for k in {i // 3 for i in index}) <= budget or len({i // 3 for i in index}) == 1
    plain = list(iter_micro_batches(batch, rows, dynamic=True, max_tokens=budget, size=2,
                                    device=torch.device("cpu"), packed=True))
    assert len(micro) < len(plain)


def test_update_actor_results_do_not_depend_on_prompt_sharing(demo_assets, prompt_ids, monkeypatch):
    """Same metrics, log-probs and weights (float tolerance) with and without `engine.rollout.prefix`."""
    from engine.roles.actor import ActorRollout
    from engine.roles.forward import batched_log_probs

    batch = grouped_batch(prompt_ids)
    mask = batch["response_mask"]
    gen = torch.Generator().manual_seed(3)
    advantages = torch.randn(mask.shape[0], 1, generator=gen).expand_as(mask) * mask
    ref = torch.randn(mask.shape, generator=gen) * 0.1 - 3.0
    outs, calls = [], []
    real = prefix.response_logits
    monkeypatch.setattr(prefix, "response_logits", lambda *a: calls.append(1) or real(*a))
    for shared in (True, False):
        if not shared:
            assert calls  # the first run did score through engine.rollout.prefix
            monkeypatch.setattr(prefix, "supports", lambda model: False)
        torch.manual_seed(0)
        role = ActorRollout(config(), demo_assets["model"], total_steps=2)
        old = batched_log_probs(role.model, batch, temperature=1.0, dynamic=True, max_tokens=4096, size=2,
                                device=torch.device("cpu"))
        out = role.update_actor(dict(batch, advantages=advantages, ref_log_probs=ref), [12])
        outs.append((old, out, [p.detach().clone() for p in role.model.parameters()]))
    (old_a, out_a, w_a), (old_b, out_b, w_b) = outs
    torch.testing.assert_close(old_a * mask, old_b * mask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_a["log_probs"] * mask, out_b["log_probs"] * mask, atol=1e-5, rtol=1e-5)
    metrics_a = {k: s / w for k, (s, w) in out_a["metrics"].items() if w}
    metrics_b = {k: s / w for k, (s, w) in out_b["metrics"].items() if w}
    assert metrics_a.keys() == metrics_b.keys() and "actor/entropy" in metrics_a
    for k, value in metrics_a.items():
        assert value == pytest.approx(metrics_b[k], rel=1e-4, abs=1e-6), k
    # Adam's first step moves every weight by about lr (1e-3) whatever its gradient's size, so a
    # gradient entry near 0 that differs by float rounding may move its weight differently; all
    # but a few entries must agree closely (the gradients themselves are compared above).
    for a, b in zip(w_a, w_b, strict=True):
        diff = (a - b).abs()
        assert float(diff.max()) <= 2e-3 and float(diff.mean()) <= 1e-7
