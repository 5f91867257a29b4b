"""engine.roles: the plain role classes (no Ray) and the batch layout they share."""

from __future__ import annotations

import pytest
import torch

from engine.config import ModelConfig, PPOConfig, build_config
from engine.data import load_rows, tokenize_prompts
from engine.roles.batch import build_batch, gather_response, select, shard_rows
from engine.rollout.sampling import row_seed

CFG = {
    "data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
    "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 2, "ppo_micro_batch_size_per_gpu": 8,
              "use_dynamic_bsz": False, "optim": {"lr": 1e-3}},
    "critic": {"ppo_micro_batch_size_per_gpu": 8, "use_dynamic_bsz": False, "optim": {"lr": 1e-3}},
    "rollout": {"n": 2},
}


def config(**overrides) -> PPOConfig:
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in CFG.items()}
    for section, values in overrides.items():
        data.setdefault(section, {}).update(values)
    return build_config(PPOConfig, data)


@pytest.fixture(scope="module")
def prompts(demo_assets):
    from engine.models import load_tokenizer

    tokenizer = load_tokenizer(demo_assets["model"])
    rows = load_rows(demo_assets["prompts_train"], "prompts")[:8]
    return tokenize_prompts(rows, tokenizer, 32, "error")


@pytest.fixture(scope="module")
def actor(demo_assets):
    from engine.roles.actor import ActorRollout

    torch.set_num_threads(1)
    return ActorRollout(config(), demo_assets["model"], total_steps=10)


def rollout(actor, prompts):
    ids = [p.prompt_ids for p in prompts]
    batch, seconds = actor.generate(ids, [row_seed(0, 0, i) for i in range(len(ids))])
    assert seconds > 0
    return batch


def test_shard_rows_split_every_mini_batch_across_workers():
    rows, sizes = shard_rows(12, num_mini_batches=3, num_workers=2)
    assert sorted(r for w in rows for r in w) == list(range(12))
    assert sizes == [[2, 2, 2], [2, 2, 2]]
    assert rows == [[0, 1, 4, 5, 8, 9], [2, 3, 6, 7, 10, 11]]
    rows, sizes = shard_rows(7, num_mini_batches=2, num_workers=2)
    assert sorted(r for w in rows for r in w) == list(range(7))
    assert [sum(s) for s in sizes] == [len(r) for r in rows]


def test_batch_layout_and_response_positions():
    batch = build_batch([[5, 6, 7], [8]], [[1, 2], [3, 4, 9]], prompt_width=4, response_width=3, pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 1, 2, 0, 0], [8, 3, 4, 9, 0, 0, 0]]
    assert batch["response_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    positions = torch.arange(7).expand(2, -1)
    # The output at position prompt_len - 1 + j scores response token j.
    assert gather_response(positions, batch["prompt_lens"], 3).tolist() == [[2, 3, 4], [0, 1, 2]]
    assert select(batch, [1])["prompt_lens"].tolist() == [1]


def test_old_log_probs_match_a_plain_forward(actor, prompts):
    batch = rollout(actor, prompts[:3])
    log_probs = actor.compute_log_prob(batch)["log_probs"]
    assert log_probs.shape == batch["responses"].shape
    actor.model.eval()
    for i in range(3):
        n_prompt = int(batch["prompt_lens"][i])
        n_resp = int(batch["response_mask"][i].sum())
        seq = batch["input_ids"][i, :n_prompt + n_resp][None]
        with torch.no_grad():
            logp = torch.log_softmax(actor.model(input_ids=seq).logits[0].float(), -1)
        expected = logp[n_prompt - 1:n_prompt + n_resp - 1].gather(1, seq[0, n_prompt:, None]).squeeze(1)
        torch.testing.assert_close(log_probs[i, :n_resp], expected, atol=1e-5, rtol=1e-5)
        assert (log_probs[i, n_resp:] == 0).all()
    actor.model.train()


def test_reference_equals_untrained_actor(actor, prompts, demo_assets):
    from engine.roles.reference import Reference

    batch = rollout(actor, prompts[:4])
    ref = Reference(config(), demo_assets["model"]).compute_ref_log_prob(batch)["log_probs"]
    torch.testing.assert_close(ref, actor.compute_log_prob(batch)["log_probs"], atol=1e-5, rtol=1e-5)


def _train_batch(actor, batch, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    mask = batch["response_mask"]
    return dict(batch, old_log_probs=actor.compute_log_prob(batch)["log_probs"],
                advantages=torch.randn(mask.shape, generator=gen) * mask,
                ref_log_probs=torch.zeros(mask.shape))


def _trained(role):
    return {k: v.detach().clone() for k, v in role.model.named_parameters() if v.requires_grad}


def test_micro_batching_does_not_change_the_update(demo_assets, prompts):
    """Gradient accumulation over micro-batches of 1 equals one pass over the whole mini-batch."""
    from engine.roles.actor import ActorRollout

    results = []
    for micro in (1, 8):
        role = ActorRollout(config(actor={"ppo_micro_batch_size_per_gpu": micro}), demo_assets["model"],
                            total_steps=10)
        batch = _train_batch(role, rollout(role, prompts[:4]))
        out = role.update_actor(batch, [2, 2])
        assert not out["nonfinite"]
        results.append((_trained(role), out["metrics"]))
    for key, value in results[0][0].items():
        torch.testing.assert_close(value, results[1][0][key], atol=2e-5, rtol=1e-4)
    m0, m1 = results[0][1], results[1][1]
    assert m0["actor/pg_loss"][0] / m0["actor/pg_loss"][1] == pytest.approx(
        m1["actor/pg_loss"][0] / m1["actor/pg_loss"][1], rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("mode", ["seq-mean-token-sum-norm", "token-mean"])
def test_duplicated_rows_give_the_same_actor_gradient(mode, demo_assets, prompts):
    """Dr. GRPO's seq-mean-token-sum-norm is a mean over sequences: the same rows twice in a
    mini-batch (split over micro-batches of different widths) give the same gradient norm."""
    from engine.roles.actor import ActorRollout
    from engine.roles.batch import concat

    role = ActorRollout(config(actor={"loss_agg_mode": mode, "ppo_epochs": 1, "ppo_micro_batch_size_per_gpu": 3}),
                        demo_assets["model"], total_steps=10)
    batch = _train_batch(role, rollout(role, prompts[:4]))
    del batch["policy_version"]  # the same rows are trained twice, from the same restored weights
    role.snapshot()
    norms = []
    for rows in (batch, concat([batch, batch])):
        norms.append(role.update_actor(rows, [len(rows["input_ids"])])["metrics"]["actor/grad_norm"][0])
        role.restore()
    assert norms[0] > 0
    assert norms[1] == pytest.approx(norms[0], rel=1e-5)


def test_update_snapshot_restore_and_mitigation(demo_assets, prompts):
    from engine.roles.actor import ActorRollout

    role = ActorRollout(config(), demo_assets["model"], total_steps=10)
    batch = _train_batch(role, rollout(role, prompts[:4]))
    before = _trained(role)
    role.snapshot()
    out = role.update_actor(batch, [2, 2])
    assert set(out) == {"metrics", "log_probs", "nonfinite", "time_s"}
    assert {"actor/pg_loss", "actor/entropy", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl",
            "actor/grad_norm", "actor/lr"} <= set(out["metrics"])
    assert any(not torch.equal(before[k], v) for k, v in _trained(role).items())
    assert not torch.equal(out["log_probs"], batch["old_log_probs"])
    role.restore()
    for key, value in _trained(role).items():
        assert torch.equal(value, before[key])
    assert role.scale_lr(0.5) == pytest.approx(0.5e-3)
    role.set_clip_ratio(0.1)
    assert (role.clip_low, role.clip_high) == (0.1, 0.1)


def test_nonfinite_advantages_skip_the_step(demo_assets, prompts):
    from engine.roles.actor import ActorRollout

    role = ActorRollout(config(), demo_assets["model"], total_steps=10)
    batch = _train_batch(role, rollout(role, prompts[:4]))
    batch["advantages"] = batch["advantages"] * float("nan")
    before = _trained(role)
    out = role.update_actor(batch, [2, 2])
    assert out["nonfinite"]
    for key, value in _trained(role).items():
        assert torch.equal(value, before[key])


def test_lora_actor_is_its_own_reference(demo_assets, prompts):
    from engine.roles.actor import ActorRollout

    role = ActorRollout(config(model={"lora_rank": 4, "lora_alpha": 8}), demo_assets["model"], total_steps=10)
    assert role.is_lora()
    batch = rollout(role, prompts[:4])
    ref = role.compute_ref_log_prob(batch)["log_probs"]
    # A fresh adapter is the identity (LoRA B = 0).
    torch.testing.assert_close(ref, role.compute_log_prob(batch)["log_probs"], atol=1e-5, rtol=1e-5)
    role.update_actor(_train_batch(role, batch), [2, 2])
    assert not torch.allclose(role.compute_log_prob(batch)["log_probs"], ref)
    torch.testing.assert_close(role.compute_ref_log_prob(batch)["log_probs"], ref)


def test_critic_values_and_update(demo_assets, actor, prompts):
    from engine.roles.critic import Critic

    critic = Critic(config(), demo_assets["model"], total_steps=10)
    batch = rollout(actor, prompts[:4])
    values = critic.compute_values(batch)["values"]
    assert values.shape == batch["responses"].shape
    assert (values[batch["response_mask"] == 0] == 0).all()
    train = dict(batch, values=values, returns=torch.ones_like(values) * batch["response_mask"])
    losses = []
    for _ in range(3):
        out = critic.update_critic(train, [2, 2])
        losses.append(out["metrics"]["critic/vf_loss"][0] / out["metrics"]["critic/vf_loss"][1])
    assert losses[-1] < losses[0]


def test_rule_reward_scores(demo_assets, actor):
    from engine.rewards.rules import resolve_rule_rewards
    from engine.roles.reward import Reward

    tok = actor.tokenizer
    prompt = tok("What is 3 + 4?")["input_ids"]
    right = tok("3 + 4 = 7\n#### 7", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    wrong = tok("#### 8", add_special_tokens=False)["input_ids"]
    batch = build_batch([prompt, prompt], [right, wrong], prompt_width=32, response_width=16,
                        pad_id=tok.pad_token_id)
    reward = Reward(config(), tokenizer_path=demo_assets["model"],
                    functions=resolve_rule_rewards({}, ["gsm8k"]), function=None, options={"format_score": 0.1})
    meta = [{"ground_truth": "7", "data_source": "gsm8k", "prompt": "What is 3 + 4?"}] * 2
    assert reward.compute_scores(batch, meta)["scores"].tolist() == pytest.approx([1.0, 0.1])


def test_reward_model_scores_match_engine_models(demo_assets, actor, prompts, tmp_path):
    from engine.models import load_reward_model, reward_scores, save_model
    from engine.roles.reward import Reward

    torch.manual_seed(0)
    rm = load_reward_model(demo_assets["model"], ModelConfig())
    save_model(rm, actor.tokenizer, tmp_path / "rm")
    reward = Reward(config(), tokenizer_path=demo_assets["model"], model_path=str(tmp_path / "rm"))
    batch = rollout(actor, prompts[:3])
    scores = reward.compute_scores(batch, [{}] * 3)["scores"]
    rm.eval()
    for i in range(3):
        n = int(batch["attention_mask"][i].sum())
        with torch.no_grad():
            one = reward_scores(rm, batch["input_ids"][i:i + 1, :n], batch["attention_mask"][i:i + 1, :n])
        assert scores[i].item() == pytest.approx(one.item(), abs=1e-5)


def test_reward_model_with_another_tokenizer_rescores_the_text(demo_assets, actor, prompts, tmp_path):
    from engine.models import load_reward_model, load_tokenizer, save_model
    from engine.roles.reward import Reward

    torch.manual_seed(0)
    rm = load_reward_model(demo_assets["model"], ModelConfig())
    other = load_tokenizer(demo_assets["model"])
    other.add_tokens(["<rm-only>"])  # a different vocabulary: ids cannot be shared
    save_model(rm, other, tmp_path / "rm")
    reward = Reward(config(), tokenizer_path=demo_assets["model"], model_path=str(tmp_path / "rm"))
    assert not reward.same_vocab
    batch = rollout(actor, prompts[:3])
    meta = [{"prompt": p.text} for p in prompts[:3]]
    scores = reward.compute_scores(batch, meta)["scores"]
    assert scores.shape == (3,) and torch.isfinite(scores).all()


def test_retokenizing_for_another_vocabulary_keeps_the_whole_conversation(demo_assets, actor, prompts, tmp_path):
    from engine.data import tokenize_prompts
    from engine.models import load_reward_model, load_tokenizer, save_model
    from engine.roles.reward import Reward

    torch.manual_seed(0)
    other = load_tokenizer(demo_assets["model"])
    other.add_tokens(["<rm-only>"])
    save_model(load_reward_model(demo_assets["model"], ModelConfig()), other, tmp_path / "rm")
    reward = Reward(config(), tokenizer_path=demo_assets["model"], model_path=str(tmp_path / "rm"))
    chat = [{"role": "system", "content": "answer tersely"}, {"role": "user", "content": "what is 2 + 2"},
            {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3 + 3"}]
    example = tokenize_prompts([{"prompt": chat}], load_tokenizer(demo_assets["model"]), 64, "left")[0]
    assert example.text == "and 3 + 3" and example.conversation == chat
    batch = rollout(actor, prompts[:1])
    scored = reward._retokenize(batch, [{"prompt": example.text, "conversation": example.conversation}])
    text = other.decode(scored["input_ids"][0][scored["attention_mask"][0].bool()])
    assert "answer tersely" in text and "what is 2 + 2" in text and "and 3 + 3" in text


def test_on_policy_update_without_old_log_probs_equals_the_recomputed_one(demo_assets, prompts):
    """One epoch in one mini-batch: the update's own forward serves as the old log-probs, and the
    weights come out as with the `old_log_prob` pass; more epochs or mini-batches refuse it."""
    from engine.roles.actor import ActorRollout

    on_policy = config(actor={"ppo_epochs": 1, "ppo_mini_batch_size": 4})
    results = []
    for recompute in (True, False):
        role = ActorRollout(on_policy, demo_assets["model"], total_steps=10)
        batch = _train_batch(role, rollout(role, prompts[:4]))
        if not recompute:
            batch.pop("old_log_probs")
        out = role.update_actor(batch, [4])
        assert not out["nonfinite"]
        results.append((_trained(role), out))
    for key, value in results[0][0].items():
        torch.testing.assert_close(value, results[1][0][key], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(results[1][1]["log_probs"], results[0][1]["log_probs"], atol=1e-5, rtol=1e-5)
    assert results[1][1]["metrics"]["actor/pg_clipfrac"][0] == 0.0
    role = ActorRollout(config(), demo_assets["model"], total_steps=10)  # 2 epochs, 2 mini-batches
    batch = _train_batch(role, rollout(role, prompts[:4]))
    batch.pop("old_log_probs")
    with pytest.raises(ValueError, match="one PPO epoch"):
        role.update_actor(batch, [2, 2])
