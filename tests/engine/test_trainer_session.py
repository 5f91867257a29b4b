"""Interactive trainer sessions (`engine.interactive.session.TrainingSession`, driven directly, without
Ray) on the demo model: an on-policy RL loop, sampling and its knobs, the loss functions and their
knobs, and AdamW's knobs. Saved states and bad input: test_trainer_states.py."""

from __future__ import annotations

import math

import pytest
import torch
from trainer_sessions import PROMPTS, make, max_diff, prompt_ids, weights_of

from engine.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")


# --- on-policy RL --------------------------------------------------------------------------------------

def even_share(tokens: list[int]) -> float:
    """The rule reward: the share of drawn tokens with an even id (half the vocabulary)."""
    return sum(t % 2 == 0 for t in tokens) / len(tokens)


def test_rl_loop_with_sample_and_importance_sampling_raises_the_mean_reward(demo_assets, tmp_path):
    session = make(demo_assets, tmp_path)
    prompts = prompt_ids(session)
    means = []
    for _ in range(30):
        out = session.run("sample", {"prompts": prompts, "sampling_params": {"max_tokens": 8}, "num_samples": 8})
        data = []
        for i, prompt in enumerate(prompts):
            group = [s for s in out["sequences"] if s["prompt_index"] == i]
            rewards = [even_share(s["tokens"]) for s in group]
            baseline = sum(rewards) / len(rewards)
            for s, r in zip(group, rewards):
                tokens, n = prompt + s["tokens"], len(prompt) - 1
                data.append({"model_input": tokens[:-1], "loss_fn_inputs": {
                    "target_tokens": tokens[1:], "logprobs": [0.0] * n + s["logprobs"],
                    "advantages": [0.0] * n + [r - baseline] * len(s["tokens"])}})
        means.append(sum(even_share(s["tokens"]) for s in out["sequences"]) / len(out["sequences"]))
        result = session.run("forward_backward", {"data": data, "loss_fn": "importance_sampling"})
        # On-policy: the trained policy is the sampler, so every ratio is 1 (up to float rounding).
        assert result["metrics"]["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
        session.run("optim_step", {"adam_params": {"learning_rate": 1e-3}})
    first, last = sum(means[:5]) / 5, sum(means[-5:]) / 5
    assert last > first + 0.1, means


# --- sampling ------------------------------------------------------------------------------------------

def test_sample_logprobs_equal_a_forward_over_the_same_tokens(demo_assets, tmp_path):
    session = make(demo_assets, tmp_path)
    prompts = prompt_ids(session)
    out = session.run("sample", {"prompts": prompts, "sampling_params": {"max_tokens": 12, "seed": 1},
                                 "num_samples": 2})
    assert [s["prompt_index"] for s in out["sequences"]] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert out["tokens"] == sum(len(prompts[s["prompt_index"]]) + len(s["tokens"]) for s in out["sequences"])
    data = []
    for s in out["sequences"]:
        tokens = prompts[s["prompt_index"]] + s["tokens"]
        data.append({"model_input": tokens[:-1],
                     "loss_fn_inputs": {"target_tokens": tokens[1:], "weights": [0.0] * (len(tokens) - 1)}})
    forward = session.run("forward", {"data": data, "loss_fn": "cross_entropy"})
    for s, f in zip(out["sequences"], forward["loss_fn_outputs"]):
        n = len(s["tokens"])
        assert len(s["logprobs"]) == n
        assert f["logprobs"][-n:] == pytest.approx(s["logprobs"], abs=1e-5)
        assert "sampling_logprobs" not in s  # temperature 1: the same numbers
    # At another temperature `logprobs` are still the model's own (as `forward` gives them), and
    # `sampling_logprobs` those of softmax(logits / T), the distribution drawn from.
    hot = session.run("sample", {"prompts": prompts[:1], "sampling_params": {"max_tokens": 12, "seed": 1,
                                                                             "temperature": 2.0}})
    first = hot["sequences"][0]
    tokens = prompts[0] + first["tokens"]
    own = session.run("forward", {"data": [{"model_input": tokens[:-1], "loss_fn_inputs": {
        "target_tokens": tokens[1:], "weights": [0.0] * (len(tokens) - 1)}}], "loss_fn": "cross_entropy"})
    own = own["loss_fn_outputs"][0]["logprobs"][-len(first["tokens"]):]
    assert first["logprobs"] == pytest.approx(own, abs=1e-5)
    assert max(abs(a - b) for a, b in zip(own, first["sampling_logprobs"])) > 0.1
    with torch.no_grad():
        logits = session.model(input_ids=torch.tensor([tokens[:-1]])).logits[0, len(prompts[0]) - 1:]
    hot_logps = torch.log_softmax(logits / 2.0, -1).gather(-1, torch.tensor(first["tokens"])[:, None])[:, 0]
    assert first["sampling_logprobs"] == pytest.approx(hot_logps.tolist(), abs=1e-5)


def test_prompt_logprobs_equal_a_forward_over_the_prompt(demo_assets, tmp_path):
    session = make(demo_assets, tmp_path)
    prompts = prompt_ids(session)[:2]
    out = session.run("sample", {"prompts": prompts, "sampling_params": {"max_tokens": 4, "seed": 1},
                                 "num_samples": 2, "prompt_logprobs": True})
    data = [{"model_input": p[:-1], "loss_fn_inputs": {"target_tokens": p[1:], "weights": [0.0] * (len(p) - 1)}}
            for p in prompts]
    forward = session.run("forward", {"data": data, "loss_fn": "cross_entropy"})
    assert len(out["prompt_logprobs"]) == len(prompts)
    for p, got, f in zip(prompts, out["prompt_logprobs"], forward["loss_fn_outputs"]):
        assert len(got) == len(p) and got[0] is None
        assert got[1:] == pytest.approx(f["logprobs"], abs=1e-5)
    assert "prompt_logprobs" not in session.run("sample", {"prompts": prompts, "sampling_params": {"max_tokens": 2}})
    with pytest.raises(ConfigError) as err:
        session.run("sample", {"prompts": prompts, "prompt_logprobs": "yes"})
    assert err.value.param == "prompt_logprobs"


def test_sampling_knobs(demo_assets, tmp_path):
    session = make(demo_assets, tmp_path)
    prompts = prompt_ids(session)[:2]

    def draw(**params):
        num = params.pop("num_samples", 1)
        return session.run("sample", {"prompts": prompts, "sampling_params": params, "num_samples": num})["sequences"]

    def tokens(seqs):
        return [s["tokens"] for s in seqs]

    # seed: the same seed draws the same tokens, another seed others
    assert tokens(draw(max_tokens=10, seed=5)) == tokens(draw(max_tokens=10, seed=5))
    assert tokens(draw(max_tokens=10, seed=5)) != tokens(draw(max_tokens=10, seed=6))
    # without a seed: each call draws anew, and a new session with the same seed repeats the calls
    unseeded = [tokens(draw(max_tokens=10)) for _ in range(2)]
    assert unseeded[0] != unseeded[1]
    again = make(demo_assets, tmp_path)
    assert [tokens(again.run("sample", {"prompts": prompts, "sampling_params": {"max_tokens": 10}})["sequences"])
            for _ in range(2)] == unseeded
    # num_samples
    assert [s["prompt_index"] for s in draw(max_tokens=4, num_samples=3)] == [0, 0, 0, 1, 1, 1]
    # temperature 0 is greedy: every seed gives the argmax sequence, as top_k 1 and a tiny top_p do
    greedy = tokens(draw(max_tokens=10, temperature=0.0, seed=1))
    assert tokens(draw(max_tokens=10, temperature=0.0, seed=2)) == greedy
    assert tokens(draw(max_tokens=10, top_k=1, seed=3)) == greedy
    assert tokens(draw(max_tokens=10, top_p=1e-6, seed=4)) == greedy
    assert tokens(draw(max_tokens=10, seed=4)) != greedy
    # top_k: every token drawn is among the k most likely
    seqs = draw(max_tokens=10, top_k=3, seed=9, num_samples=4)
    for s in seqs:
        full = prompts[s["prompt_index"]] + s["tokens"]
        with torch.no_grad():
            logits = session.model(input_ids=torch.tensor([full[:-1]])).logits[0]
        start = len(prompts[s["prompt_index"]]) - 1
        for j, tok in enumerate(s["tokens"]):
            assert tok in torch.topk(logits[start + j], 3).indices.tolist()
    # max_tokens, and stop_reason "length" for a continuation it cut
    long = draw(max_tokens=7, seed=8, num_samples=4)
    assert all(len(s["tokens"]) <= 7 for s in long)
    assert all(s["stop_reason"] == ("stop" if s["tokens"][-1] == session.tokenizer.eos_token_id else "length")
               for s in long)
    # stop: a token id ends the continuation there; a string at the token that completes it
    free = draw(max_tokens=12, seed=11)[0]
    token = free["tokens"][3]
    cut = draw(max_tokens=12, seed=11, stop=[token])[0]
    assert cut["tokens"] == free["tokens"][:free["tokens"].index(token) + 1] and cut["stop_reason"] == "stop"
    text = session.tokenizer.decode(free["tokens"][:5])
    stop = text[-2:] if text[-2:].strip() else text[-3:]
    cut = draw(max_tokens=12, seed=11, stop=[stop])[0]
    assert stop in session.tokenizer.decode(cut["tokens"]) and stop not in session.tokenizer.decode(cut["tokens"][:-1])
    assert cut["stop_reason"] == "stop" and free["tokens"][:len(cut["tokens"])] == cut["tokens"]
    # text prompts use the chat template, as jobs' prompts do
    by_text = session.run("sample", {"prompts": PROMPTS[:2], "sampling_params": {"max_tokens": 10, "seed": 5}})
    assert tokens(by_text["sequences"]) == tokens(draw(max_tokens=10, seed=5))
    assert by_text["sequences"][0]["text"] == session.tokenizer.decode(by_text["sequences"][0]["tokens"],
                                                                       skip_special_tokens=True)


# --- loss functions --------------------------------------------------------------------------------------

def _policy_logprobs(session, data):
    return [o["logprobs"] for o in session.run("forward", {"data": data, "loss_fn": "cross_entropy"})["loss_fn_outputs"]]


def test_cross_entropy_is_minus_the_weighted_sum_and_counts_tokens(demo_assets, tmp_path, sft_datums):
    session = make(demo_assets, tmp_path)
    data = sft_datums(3)
    out = session.run("forward", {"data": data, "loss_fn": "cross_entropy"})
    expected = -sum(w * lp for d, o in zip(data, out["loss_fn_outputs"])
                    for w, lp in zip(d["loss_fn_inputs"]["weights"], o["logprobs"]))
    assert out["metrics"]["loss:sum"] == pytest.approx(expected, rel=1e-5)
    assert out["tokens"] == sum(len(d["model_input"]) for d in data)
    assert [len(o["logprobs"]) for o in out["loss_fn_outputs"]] == [len(d["model_input"]) for d in data]
    assert all(p.grad is None for p in session.params)  # forward computes no gradients


def test_metrics_do_not_depend_on_the_micro_batches(demo_assets, tmp_path, sft_datums, monkeypatch):
    """Tinker's `weights:sum` is the call's total and `loss:sum` the loss's, however the call is cut."""
    from engine.interactive import forward

    session = make(demo_assets, tmp_path)
    data = sft_datums(3)
    whole = session.run("forward", {"data": data, "loss_fn": "cross_entropy"})["metrics"]
    monkeypatch.setattr(forward, "micro_batches", lambda lengths, unit: [[i] for i in range(len(lengths))])
    split = session.run("forward", {"data": data, "loss_fn": "cross_entropy"})["metrics"]
    total = sum(sum(d["loss_fn_inputs"]["weights"]) for d in data)
    assert whole["weights:sum"] == pytest.approx(total, rel=1e-6)
    assert split["weights:sum"] == pytest.approx(total, rel=1e-6)
    assert split["loss:sum"] == pytest.approx(whole["loss:sum"], rel=1e-5)


@pytest.mark.parametrize(("ratio", "advantage", "config", "per_token"), [
    (1.5, 1.0, {}, -1.2),                              # clipped at clip_high_threshold 1.2
    (1.5, 1.0, {"clip_high_threshold": 1.4}, -1.4),
    (0.5, -1.0, {}, 0.8),                              # clipped at clip_low_threshold 0.8
    (0.5, -1.0, {"clip_low_threshold": 0.7}, 0.7),
    (5.0, -1.0, {}, 5.0),                              # Tinker's ppo has no dual clip (VERL's gave 3.0)
    (5.0, 1.0, {"clip_low_threshold": 0.5, "clip_high_threshold": 2.0}, -2.0),
])
def test_ppo_clips_as_configured(demo_assets, tmp_path, sft_datums, ratio, advantage, config, per_token):
    session = make(demo_assets, tmp_path)
    data = sft_datums(2)
    current = _policy_logprobs(session, data)
    ppo = []
    for d, lp in zip(data, current):
        n = len(lp)
        ppo.append({"model_input": d["model_input"], "loss_fn_inputs": {
            "target_tokens": d["loss_fn_inputs"]["target_tokens"], "logprobs": [x - math.log(ratio) for x in lp],
            "advantages": [advantage] * (n - 2) + [0.0, 0.0]}})
    counted = sum(len(lp) - 2 for lp in current)
    out = session.run("forward", {"data": ppo, "loss_fn": "ppo", "loss_fn_config": config})
    assert out["metrics"]["loss:sum"] == pytest.approx(per_token * counted, rel=1e-4)
    sampling = session.run("forward", {"data": ppo, "loss_fn": "importance_sampling"})
    assert sampling["metrics"]["loss:sum"] == pytest.approx(-ratio * advantage * counted, rel=1e-4)
    assert sampling["metrics"]["ratio_mean"] == pytest.approx(ratio, rel=1e-4)


@pytest.mark.parametrize(("loss_fn", "config", "per_token"), [
    ("cispo", {}, lambda r, lp, a: -min(max(r, 0.0), 4.0) * lp * a),
    ("cispo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}, lambda r, lp, a: -min(max(r, 0.8), 1.2) * lp * a),
    ("dro", {}, lambda r, lp, a: -(lp * a - 0.5 * 0.05 * math.log(r) ** 2)),
    ("dro", {"beta": 1.0}, lambda r, lp, a: -(lp * a - 0.5 * math.log(r) ** 2)),
])
def test_cispo_and_dro_are_tinkers(demo_assets, tmp_path, sft_datums, loss_fn, config, per_token):
    session = make(demo_assets, tmp_path)
    data = sft_datums(2)
    current = _policy_logprobs(session, data)
    ratio, advantage = 3.0, -1.0
    rows, expected = [], 0.0
    for d, lp in zip(data, current):
        n = len(lp)
        advantages = [advantage] * (n - 2) + [0.0, 0.0]  # zero advantage: the token counts for nothing
        rows.append({"model_input": d["model_input"], "loss_fn_inputs": {
            "target_tokens": d["loss_fn_inputs"]["target_tokens"], "logprobs": [x - math.log(ratio) for x in lp],
            "advantages": advantages}})
        expected += sum(per_token(ratio, x, a) for x, a in zip(lp, advantages) if a)
    out = session.run("forward", {"data": rows, "loss_fn": loss_fn, "loss_fn_config": config})
    assert out["metrics"]["loss:sum"] == pytest.approx(expected, rel=1e-4)


def test_dpo_beta_and_given_reference_logprobs(demo_assets, tmp_path, sft_datums):
    session = make(demo_assets, tmp_path)
    data = sft_datums(4)
    for d in data:
        d["loss_fn_inputs"]["weights"] = [1.0 if w else 0.0 for w in d["loss_fn_inputs"]["weights"]]
    current = _policy_logprobs(session, data)
    # With the reference 0.5 nats less sure of each chosen and 0.25 nats surer of each rejected response,
    # h = 0.5 * chosen tokens + 0.25 * rejected tokens.
    shifts = [0.5, -0.25, 0.5, -0.25]
    for d, lp, shift in zip(data, current, shifts):
        d["loss_fn_inputs"]["ref_logprobs"] = [x - shift for x in lp]
    tokens = [sum(d["loss_fn_inputs"]["weights"]) for d in data]
    h = [0.5 * tokens[0] + 0.25 * tokens[1], 0.5 * tokens[2] + 0.25 * tokens[3]]
    for beta in (0.1, 0.02):
        out = session.run("forward", {"data": data, "loss_fn": "dpo", "loss_fn_config": {"beta": beta}})
        expected = sum(math.log1p(math.exp(-beta * x)) for x in h) / 2
        assert out["metrics"]["loss:sum"] == pytest.approx(expected, rel=1e-5)
        assert out["metrics"]["dpo/accuracy"] == 1.0
        assert out["metrics"]["dpo/margin"] == pytest.approx(beta * sum(h) / 2, rel=1e-4)


# --- optimizer -----------------------------------------------------------------------------------------

def test_every_adam_param_changes_the_update(demo_assets, tmp_path, sft_datums):
    session = make(demo_assets, tmp_path)
    start = session.run("save_state", {"name": "start"})["path"]
    batches = [sft_datums(2), sft_datums(2, offset=2)]
    base = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0,
            "grad_clip_norm": 0.0}

    def two_steps(**change):
        session.run("load_state", {"path": start, "optimizer": False})
        norms = []
        for batch in batches:  # betas matter from the second step on
            session.run("forward_backward", {"data": batch, "loss_fn": "cross_entropy"})
            out = session.run("optim_step", {"adam_params": {**base, **change}})
            norms.append(out["metrics"]["grad_norm"])
        assert out["step"] == 2
        return weights_of(session), norms

    reference, norms = two_steps()
    assert two_steps()[0].keys() == reference.keys() and max_diff(two_steps()[0], reference) == 0.0
    for change in ({"learning_rate": 2e-3}, {"beta1": 0.5}, {"beta2": 0.5}, {"eps": 1e-2},
                   {"weight_decay": 10.0}, {"grad_clip_norm": min(norms) / 10}):
        assert max_diff(two_steps(**change)[0], reference) > 1e-6, change
    _, clipped_norms = two_steps(grad_clip_norm=min(norms) / 10)
    assert clipped_norms[0] == pytest.approx(norms[0])  # the reported norm is the one before clipping
