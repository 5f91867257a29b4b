"""engine.packing: packed forwards (`model.use_remove_padding`) equal padded ones, keep sequences
apart, give the same gradients, and the knob changes what the jobs compute."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from engine import packing
from engine.config import JobRequest, ModelConfig, PPOConfig, RewardModelConfig, SFTConfig, build_config
from engine.data import pad
from engine.methods.sft import sft_loss_sum
from engine.models import (
    load_policy,
    load_reward_model,
    load_value_model,
    logits_at,
    reward_scores,
    token_values,
)
from engine.roles.batch import build_batch, response_positions
from engine.roles.forward import policy_log_probs, trim_rows
from engine.runtime.reporting import RecordingReporter

PACKED, PADDED = ModelConfig(use_remove_padding=True), ModelConfig(use_remove_padding=False)
TOL = {"rtol": 1e-5, "atol": 1e-5}


pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (tests/engine/conftest.py)


def sequences(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 800, (n,), generator=g).tolist() for n in lengths]


def pair_of(load, path, **cfg):
    """The same weights loaded twice, packed and padded (seeded: a fresh score head is identical)."""
    out = []
    for base in (PACKED, PADDED):
        torch.manual_seed(0)
        out.append(load(path, dataclasses.replace(base, **cfg), trainable=True))
    assert packing.enabled(out[0]) and not packing.enabled(out[1])
    return out


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_grads(a, b):
    ga, gb = grads(a), grads(b)
    assert ga.keys() == gb.keys() and ga
    for name in ga:  # float32 summation order differs: equal to 1e-5 of the gradient's scale
        scale = float(gb[name].abs().max())
        assert scale > 0, name
        torch.testing.assert_close(ga[name], gb[name], rtol=1e-5, atol=1e-5 * scale, msg=name)


# --- the pure maps ----------------------------------------------------------------------------------

def test_pack_lays_sequences_end_to_end_with_restarting_positions():
    seqs = [[5, 6, 7], [8], [9, 10]]
    p = packing.pack(seqs)
    assert p.input_ids.tolist() == [[5, 6, 7, 8, 9, 10]]
    assert p.position_ids.tolist() == [[0, 1, 2, 0, 0, 1]]
    assert p.cu_seqlens.tolist() == [0, 3, 4, 6] and p.cu_seqlens.dtype == torch.int32
    ids, mask = pad(seqs, 0)
    q = packing.pack_padded(ids, mask)
    assert torch.equal(q.input_ids, p.input_ids) and torch.equal(q.position_ids, p.position_ids)
    assert q.lengths == p.lengths == (3, 1, 2)

    x = torch.arange(6.0)[None, :, None] * 10  # per-token outputs of the packed row
    assert p.last(x)[:, 0].tolist() == [20, 30, 50]
    assert p.to_padded(x[..., 0], 4).tolist() == [[0, 10, 20, 0], [30, 0, 0, 0], [40, 50, 0, 0]]
    # Positions are clamped into their own sequence, never into the next one.
    at = p.at(x[..., 0], torch.tensor([[1, 2, 3], [-1, 0, 1], [0, 1, 2]]))
    assert at.tolist() == [[10, 20, 20], [30, 30, 30], [40, 50, 50]]
    with pytest.raises(ValueError):
        packing.pack([[1], []])


def test_budget_batches_count_real_tokens():
    lengths = [300, 10, 250, 40, 900, 60, 5, 120, 700]
    groups = packing.budget_batches(lengths, 1000)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in g) <= 1000 for g in groups)
    # First-fit decreasing reaches the optimum here, ceil(2385 / 1000) = 3: 900+60+40, 700+300, the rest.
    assert len(groups) == 3
    assert packing.budget_batches([50, 2000], 100) == [[1], [0]]  # over the budget: alone


# --- equality with padded forwards -----------------------------------------------------------------

def test_packed_policy_log_probs_and_sft_loss_equal_padded_with_equal_gradients(demo_assets):
    packed, padded = pair_of(load_policy, demo_assets["model"])
    seqs = sequences([7, 31, 12, 3, 20])
    ids, mask = pad(seqs, 0)
    prompt_lens = torch.tensor([3, 10, 1, 2, 19])
    losses = []
    for model in (packed, padded):
        loss, tokens, correct = sft_loss_sum(model, ids, mask, prompt_lens)
        loss.backward()
        losses.append((loss, tokens, correct))
    torch.testing.assert_close(losses[0][0], losses[1][0], **TOL)
    assert int(losses[0][1]) == int(losses[1][1]) == sum(len(s) - max(p, 1) for s, p in zip(seqs, [3, 10, 1, 2, 19]))
    assert int(losses[0][2]) == int(losses[1][2])  # token accuracy: the same argmax hits
    assert_same_grads(packed, padded)

    # Every position's logits, not only the loss: packed row mapped back to (batch, seq).
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    with torch.no_grad():
        a, b = logits_at(packed, ids, mask, positions), logits_at(padded, ids, mask, positions)
    real = mask.bool()
    torch.testing.assert_close(a[real], b[real], **TOL)


def test_packed_reward_scores_equal_padded(demo_assets):
    packed, padded = pair_of(load_reward_model, demo_assets["model"])
    ids, mask = pad(sequences([40, 6, 17, 1, 29]), 0)
    scores = [reward_scores(m, ids, mask) for m in (packed, padded)]
    torch.testing.assert_close(scores[0], scores[1], **TOL)
    assert scores[0].shape == (5,)
    for s in scores:
        s.square().sum().backward()
    assert_same_grads(packed, padded)


def ppo_batch(seed=0):
    prompts = sequences([5, 9, 3, 12], seed)
    responses = sequences([6, 1, 8, 4], seed + 1)
    return build_batch(prompts, responses, prompt_width=16, response_width=8, pad_id=0)


def test_packed_ppo_log_probs_values_and_scores_equal_padded(demo_assets):
    mb = trim_rows(ppo_batch(), torch.device("cpu"))
    mask = mb["response_mask"].bool()

    actor, actor_ref = pair_of(load_policy, demo_assets["model"])
    out = []
    for model in (actor, actor_ref):
        log_probs, entropy = policy_log_probs(model, mb, temperature=0.7, entropy="grad")
        (log_probs[mask].sum() + entropy[mask].sum()).backward()
        out.append(log_probs)
    torch.testing.assert_close(out[0][mask], out[1][mask], **TOL)
    assert_same_grads(actor, actor_ref)

    critic, critic_ref = pair_of(load_value_model, demo_assets["model"])
    values = [token_values(m, mb["input_ids"], mb["attention_mask"]) for m in (critic, critic_ref)]
    assert values[0].shape == mb["input_ids"].shape
    real = mb["attention_mask"].bool()
    torch.testing.assert_close(values[0][real], values[1][real], **TOL)
    values[0][real].sum().backward()
    values[1][real].sum().backward()
    assert_same_grads(critic, critic_ref)

    rm, rm_ref = pair_of(load_reward_model, demo_assets["model"])
    with torch.no_grad():
        torch.testing.assert_close(reward_scores(rm, mb["input_ids"], mb["attention_mask"]),
                                   reward_scores(rm_ref, mb["input_ids"], mb["attention_mask"]), **TOL)


def test_packed_lora_and_reference_mode_equal_padded(demo_assets):
    from engine.models import reference_mode

    packed, padded = pair_of(load_policy, demo_assets["model"], lora_rank=4)
    for model in (packed, padded):  # give the adapters weight, identically
        torch.manual_seed(1)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.data.normal_(0, 0.05)
    mb = trim_rows(ppo_batch(3), torch.device("cpu"))
    mask = mb["response_mask"].bool()
    with torch.no_grad():
        a = policy_log_probs(packed, mb, temperature=1.0)[0]
        b = policy_log_probs(padded, mb, temperature=1.0)[0]
        with reference_mode(packed), reference_mode(padded):
            ra = policy_log_probs(packed, mb, temperature=1.0)[0]
            rb = policy_log_probs(padded, mb, temperature=1.0)[0]
    torch.testing.assert_close(a[mask], b[mask], **TOL)
    torch.testing.assert_close(ra[mask], rb[mask], **TOL)
    assert not torch.allclose(a[mask], ra[mask])  # the adapter does something


# --- sequences stay apart ----------------------------------------------------------------------------

def test_no_token_attends_across_sequences(demo_assets):
    model = load_policy(demo_assets["model"], PACKED, trainable=False)
    a, b = sequences([15, 12], seed=5)
    a2 = sequences([15], seed=9)[0]  # another A of the same length
    assert a2 != a

    @torch.no_grad()
    def b_logits(first, boundaries=True):
        p = packing.pack([first, b])
        # Without boundaries (no restarting positions, no cu_seq_lens): one causal row.
        inputs = p.model_inputs() if boundaries else {"input_ids": p.input_ids, "use_cache": False}
        return model(**inputs).logits[0, p.lengths[0]:]

    torch.testing.assert_close(b_logits(a), b_logits(a2), rtol=0, atol=1e-6)
    with torch.no_grad():
        alone = model(**packing.pack([b]).model_inputs()).logits[0]
    torch.testing.assert_close(b_logits(a), alone, **TOL)
    # The check can fail: with one causal attention over the whole row, B sees A.
    assert not torch.allclose(b_logits(a, boundaries=False), b_logits(a2, boundaries=False), atol=1e-3)


def test_boundaries_from_position_ids_alone(demo_assets):
    """A caller that packs by restarting position ids (transformers' convention) without
    `cu_seq_lens_*` still gets block-diagonal attention."""
    model = load_policy(demo_assets["model"], PACKED, trainable=False)
    seqs = sequences([9, 14, 4], seed=2)
    p = packing.pack(seqs)
    with torch.no_grad():
        full = model(**p.model_inputs()).logits
        by_positions = model(input_ids=p.input_ids, position_ids=p.position_ids, use_cache=False).logits
    torch.testing.assert_close(by_positions, full, rtol=0, atol=1e-6)


def test_padded_calls_and_generation_still_work_on_a_packed_model(demo_assets):
    packed, padded = pair_of(load_policy, demo_assets["model"])
    ids, mask = pad(sequences([6, 11]), 0)
    with torch.no_grad():
        torch.testing.assert_close(packed(input_ids=ids, attention_mask=mask).logits,
                                   padded(input_ids=ids, attention_mask=mask).logits, rtol=0, atol=0)
        gen = [m.generate(input_ids=ids[:1, :6], attention_mask=mask[:1, :6], max_new_tokens=5, do_sample=False)
               for m in (packed, padded)]
    assert torch.equal(gen[0], gen[1])


# --- CPU attention: batched SDPA over length buckets --------------------------------------------------

def per_sequence_attention(q, k, v, lengths, groups=1):
    """The reference: one causal SDPA per sequence, `(1, heads, total, dim)` -> `(1, total, heads, dim)`."""
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    parts = [torch.nn.functional.scaled_dot_product_attention(a, b, c, is_causal=True)
             for a, b, c in zip(q.split(lengths, 2), k.split(lengths, 2), v.split(lengths, 2))]
    return torch.cat(parts, 2).transpose(1, 2)


def attention_inputs(lengths, heads=4, kv_heads=4, dim=16, seed=0):
    """Random q/k/v laid out as transformers makes them (token-major, viewed head-major), and `cu`."""
    g = torch.Generator().manual_seed(seed)
    total = sum(lengths)
    q, k, v = (torch.randn(1, total, h, dim, generator=g).transpose(1, 2).requires_grad_()
               for h in (heads, kv_heads, kv_heads))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    module = torch.nn.Module()
    module.num_key_value_groups = heads // kv_heads
    return module, q, k, v, cu


def sdpa_calls(monkeypatch):
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def counting(q, *args, **kwargs):
        calls.append(tuple(q.shape))
        return original(q, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    return calls


LONG_TAIL = [10, 400, 13, 250, 77, 3, 1, 120, 35, 333, 18, 64]


def test_bucket_plan_pads_only_where_a_call_costs_more():
    for lengths in ([40] * 32, [35, 50, 41, 38, 49, 36] * 5, LONG_TAIL, [1], [1, 1, 2], [7, 33, 1, 20, 1, 5]):
        for channels in (64, 128, 4096):
            buckets = packing.bucket_plan(lengths, channels)
            assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
            for b in buckets:
                width = lengths[b[0]]
                assert all(lengths[i] <= width for i in b)
                assert all((width**2 - lengths[i] ** 2) * channels <= packing.CALL_COST for i in b)
                assert len(b) * width**2 <= packing.BUCKET_WASTE * sum(lengths[i] ** 2 for i in b)
    assert len(packing.bucket_plan([40] * 32)) == 1
    # Similar short lengths share few buckets; a long tail keeps its long ones apart.
    assert len(packing.bucket_plan([35, 50, 41, 38, 49, 36] * 5)) <= 2
    assert len(packing.bucket_plan(LONG_TAIL)) >= 8
    assert packing.bucket_plan([1, 400]) == [[1], [0]]
    # On a wide model the work dominates: only equal lengths share a call.
    assert packing.bucket_plan([40, 39, 40, 39], channels=4096) == [[0, 2], [1, 3]]
    # Batching pays for many short sequences in few buckets, not for a long tail in many.
    demo = [35, 50, 41, 38, 49, 36] * 5
    assert packing.use_buckets(demo, packing.bucket_plan(demo), 128)
    assert not packing.use_buckets(LONG_TAIL, packing.bucket_plan(LONG_TAIL), 128)
    assert not packing.use_buckets([23], [[0]], 128)


@pytest.mark.parametrize(("lengths", "kv_heads"), [
    ([7, 33, 1, 20, 1, 5], 4),  # mixed, with length-1 sequences
    ([40, 38, 41, 36, 45, 39, 40, 42], 4),  # demo-like: one or two buckets
    (LONG_TAIL, 4),  # several buckets
    ([23], 4),  # one sequence
    ([300, 1, 150], 4),  # every sequence alone: one call each
    ([10] * 8 + [30] * 8 + [3] * 8 + [1, 1], 4),  # several shared buckets
    ([1, 1, 1], 4),
    ([12, 30, 1, 29, 9], 2),  # GQA: 4 query heads share 2 key/value heads
    (LONG_TAIL, 1),
])
def test_bucketed_attention_equals_per_sequence_sdpa_with_equal_gradients(lengths, kv_heads, monkeypatch):
    module, q, k, v, cu = attention_inputs(lengths, kv_heads=kv_heads)
    calls = sdpa_calls(monkeypatch)
    out, _ = packing.varlen_attention(module, q, k, v, None, cu_seq_lens_q=cu)
    # One call per bucket, each a right-padded batch; where that does not pay, one per sequence.
    buckets = packing.bucket_plan(lengths, 4 * 16)
    if not packing.use_buckets(lengths, buckets, 4 * 16):
        buckets = [[i] for i in range(len(lengths))]
    assert sorted(calls) == sorted((len(b), 4, lengths[b[0]], 16) for b in buckets)
    monkeypatch.undo()
    ref = per_sequence_attention(q, k, v, lengths, groups=4 // kv_heads)
    assert out.shape == (1, sum(lengths), 4, 16) and out.is_contiguous()
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad((out * upstream).sum(), (q, k, v))
    want = torch.autograd.grad((ref * upstream).sum(), (q, k, v))
    for a, b, name in zip(got, want, "qkv"):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_bucketed_attention_keeps_sequences_apart():
    """Changing one sequence's queries, keys and values changes its outputs and no other's: a
    bucket that shared an attention row between two sequences (or let padding in) would fail."""
    lengths = [9, 14, 14, 3, 12, 1, 13]
    module, q, k, v, cu = attention_inputs(lengths)
    buckets = packing.bucket_plan(lengths, 4 * 16)
    assert len(buckets) < len(lengths) and packing.use_buckets(lengths, buckets, 4 * 16)  # really shared
    base, _ = packing.varlen_attention(module, q, k, v, None, cu_seq_lens_q=cu)
    bounds = cu.tolist()
    for j in range(len(lengths)):
        s, e = bounds[j], bounds[j + 1]
        changed = [x.detach().clone() for x in (q, k, v)]
        for x in changed:
            x[:, :, s:e] += 1.0
        out, _ = packing.varlen_attention(module, *changed, None, cu_seq_lens_q=cu)
        others = torch.ones(sum(lengths), dtype=torch.bool)
        others[s:e] = False
        torch.testing.assert_close(out[0, others], base[0, others].detach(), rtol=0, atol=0)
        assert not torch.allclose(out[0, s:e], base[0, s:e])
        # Within the sequence, causality holds: changing its last token changes only that token.
        last = [x.detach().clone() for x in (q, k, v)]
        for x in last:
            x[:, :, e - 1] += 1.0
        out, _ = packing.varlen_attention(module, *last, None, cu_seq_lens_q=cu)
        keep = torch.ones(sum(lengths), dtype=torch.bool)
        keep[e - 1] = False
        torch.testing.assert_close(out[0, keep], base[0, keep].detach(), rtol=0, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (flash varlen kernel)")
def test_cuda_half_precision_uses_varlen_kernel_and_matches_per_sequence_sdpa():
    torch.manual_seed(0)
    heads, dim, lengths = 4, 32, [7, 33, 1, 20]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(1, heads, sum(lengths), dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    module = torch.nn.Module()
    module.num_key_value_groups = 1
    out, _ = packing.varlen_attention(module, q, k, v, None, cu_seq_lens_q=cu)
    ref, _ = packing.varlen_attention(module, q.float(), k.float(), v.float(), None, cu_seq_lens_q=cu)
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)


# --- the knob changes what jobs compute -------------------------------------------------------------

def _job(assets, tmp, method, cfg_cls, cfg, remove_padding):
    cfg = {**cfg, "model": {"use_remove_padding": remove_padding}}
    if method == "sft":  # the demo SFT rows all have 22 tokens: vary the answers' lengths
        tmp.mkdir(parents=True)
        rows = [{"prompt": f"What is {i % 7} + {i % 5}?", "response": "Let me think. " * (i % 6) + f"#### {i % 7 + i % 5}"}
                for i in range(40)]
        train = tmp / "sft.jsonl"
        train.write_text("".join(json.dumps(r) + "\n" for r in rows))
        files = (str(train), None)
    else:
        files = (assets["preference_train"], assets["preference_val"])
    return JobRequest(job_id="t", method=method, config=build_config(cfg_cls, cfg), model_path=assets["model"],
                      training_file=files[0], validation_file=files[1],
                      output_dir=str(tmp / "out"), checkpoint_dir=str(tmp / "ckpt"), seed=3)


@pytest.mark.parametrize("remove_padding", [True, False])
def test_sft_and_reward_jobs_report_padding_efficiency_one_when_packed(demo_assets, tmp_path, remove_padding):
    from engine.methods.reward_model import run_reward_model
    from engine.methods.sft import run_sft

    sft = _job(demo_assets, tmp_path / "sft", "sft", SFTConfig, {
        "data": {"train_batch_size": 16, "max_prompt_length": 32, "max_response_length": 64},
        "optim": {"lr": 3e-3}, "trainer": {"total_training_steps": 2}, "use_dynamic_bsz": False,
        "micro_batch_size_per_gpu": 16},
        remove_padding)
    rm = _job(demo_assets, tmp_path / "rm", "reward_model", RewardModelConfig, {
        "data": {"train_batch_size": 8, "max_length": 64}, "optim": {"lr": 1e-3},
        "trainer": {"total_training_steps": 2}, "max_token_len_per_gpu": 256}, remove_padding)
    for request, run in ((sft, run_sft), (rm, run_reward_model)):
        reporter = RecordingReporter()
        run(request, reporter)
        efficiency = reporter.series("perf/padding_efficiency")
        assert len(efficiency) == 2
        if remove_padding:
            assert efficiency == [1.0, 1.0], request.method
        else:
            assert max(efficiency) < 0.99, request.method


def test_ppo_roles_pack_only_with_the_knob(demo_assets, monkeypatch):
    from engine.roles.critic import Critic

    rows: list[int] = []
    original = packing.Packed.model_inputs

    def spy(self):
        rows.append(self.total)
        return original(self)

    monkeypatch.setattr(packing.Packed, "model_inputs", spy)
    for flag in (True, False):
        cfg = build_config(PPOConfig, {"data": {"train_batch_size": 4, "max_prompt_length": 16,
                                                "max_response_length": 8},
                                       "actor": {"ppo_mini_batch_size": 2},
                                       "model": {"use_remove_padding": flag}})
        critic = Critic(cfg, demo_assets["model"], total_steps=1)
        assert packing.enabled(critic.model) is flag
        rows.clear()
        critic.compute_values(ppo_batch())
        # Packed: one row with the batch's real tokens (5+6, 9+1, 3+8, 12+4 = 48), no padding.
        assert rows == ([48] if flag else [])


def test_position_of_response_tokens_matches_padded_layout():
    batch = ppo_batch()
    mb = trim_rows(batch, torch.device("cpu"))
    p = packing.pack_padded(mb["input_ids"], mb["attention_mask"])
    width = mb["responses"].shape[1]
    pos = response_positions(mb["prompt_lens"], width, mb["input_ids"].shape[1])
    per_token = p.input_ids[..., None].float()
    padded = mb["input_ids"][..., None].float()
    at = p.at(per_token, pos)[..., 0]
    gathered = padded.gather(1, pos[..., None])[..., 0]
    # The token before each response token (the position whose logits score it) is the same.
    real = mb["response_mask"].bool()
    assert torch.equal(at[real], gathered[real])
