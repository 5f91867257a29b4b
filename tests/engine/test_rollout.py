"""engine.rollout.backends, .hf and .sampling: the hf backend (KV-cache sampling, EOS, greedy parity
with transformers) and the counter-based sampler."""

from __future__ import annotations

import pytest
import torch

from engine.config import ModelConfig
from engine.data import load_rows, tokenize_prompts
from engine.rollout.backends import make_rollout
from engine.rollout.hf import HFRollout
from engine.rollout.sampling import (
    SamplingParams,
    eos_token_ids,
    filter_logits,
    row_seed,
    row_uniforms,
    sample_tokens,
)


@pytest.fixture(scope="module")
def policy(demo_assets):
    from engine.models import load_policy, load_tokenizer

    torch.set_num_threads(1)
    tokenizer = load_tokenizer(demo_assets["model"])
    model = load_policy(demo_assets["model"], ModelConfig())
    prompts = tokenize_prompts(load_rows(demo_assets["prompts_train"], "prompts")[:6], tokenizer, 64, "error")
    return model, tokenizer, [p.prompt_ids for p in prompts]


def backend(model, tokenizer) -> HFRollout:
    return make_rollout("hf", model, tokenizer=tokenizer, model_path="", dtype="float32", lora_rank=0,
                        max_model_len=128, seed=0)


def test_samples_depend_only_on_the_row_seed(policy):
    model, tokenizer, prompts = policy
    rollout = backend(model, tokenizer)
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    seeds = [row_seed(3, 0, i) for i in range(len(prompts))]
    together = rollout.generate(prompts, seeds, params)
    apart = rollout.generate(prompts[:2], seeds[:2], params) + rollout.generate(prompts[2:], seeds[2:], params)
    assert together == apart
    assert all(1 <= len(r) <= 12 for r in together)
    reordered = rollout.generate(prompts[::-1], seeds[::-1], params)
    assert reordered[::-1] == together
    other = rollout.generate(prompts, [row_seed(4, 0, i) for i in range(len(prompts))], params)
    assert other != together
    assert model.training  # the mode is restored


def test_greedy_matches_transformers_generate(policy):
    model, tokenizer, prompts = policy
    rollout = backend(model, tokenizer)
    params = SamplingParams(max_new_tokens=10, do_sample=False)
    ours = rollout.generate(prompts[:3], [0, 1, 2], params)
    model.eval()
    for prompt, response in zip(prompts[:3], ours):
        ids = torch.tensor([prompt])
        reference = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
        assert response == reference[0, len(prompt):].tolist()[:len(response)]
    model.train()
    # top_k=1 is greedy whatever the temperature
    assert rollout.generate(prompts[:3], [5, 6, 7], SamplingParams(max_new_tokens=10, top_k=1)) == ours


def test_stops_at_eos(policy):
    model, tokenizer, prompts = policy
    eos = tokenizer.eos_token_id
    head = model.get_output_embeddings().weight
    saved = head.detach().clone()
    try:
        with torch.no_grad():
            head[eos] += 100.0  # EOS dominates every position
        out = backend(model, tokenizer).generate(prompts[:2], [0, 1], SamplingParams(max_new_tokens=8))
    finally:
        with torch.no_grad():
            head.copy_(saved)
    assert out == [[eos], [eos]]
    assert eos in eos_token_ids(tokenizer, model)


def test_sampling_follows_softmax():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    n = 20000
    seeds = torch.tensor([row_seed(1, i) for i in range(n)])
    tokens = sample_tokens(logits.expand(n, -1), seeds, 0, SamplingParams(max_new_tokens=1, temperature=1.0))
    freq = torch.bincount(tokens, minlength=4).float() / n
    torch.testing.assert_close(freq, torch.softmax(logits, -1), atol=0.015, rtol=0.0)
    hot = sample_tokens(logits.expand(n, -1), seeds, 0, SamplingParams(max_new_tokens=1, temperature=0.5))
    assert (hot == 0).float().mean() > freq[0]
    # Each step draws afresh: the same rows at another step are not the same tokens.
    again = sample_tokens(logits.expand(n, -1), seeds, 1, SamplingParams(max_new_tokens=1, temperature=1.0))
    assert (again != tokens).float().mean() > 0.4


def test_sampling_is_the_inverse_cdf_at_the_row_uniform():
    """Row i takes the first token whose cumulative probability exceeds u_i: small and large u land on
    the first and last tokens of the support, and filtered (zero-probability) tokens are never drawn,
    wherever they sit in the vocabulary."""
    logits = torch.tensor([float("-inf"), 0.0, float("-inf"), 1.0, 2.0, float("-inf")])
    probs = torch.softmax(logits, -1).double()
    cdf = probs.cumsum(-1)
    n = 4000
    seeds = torch.tensor([row_seed(9, i) for i in range(n)])
    tokens = sample_tokens(logits.expand(n, -1), seeds, 3, SamplingParams(max_new_tokens=1))
    u = row_uniforms(seeds, 3)
    assert torch.equal(tokens, torch.searchsorted(cdf, (u * cdf[-1])[:, None], right=True)[:, 0])
    assert set(tokens.tolist()) == {1, 3, 4}
    assert bool((tokens[u < probs[1] * 0.99] == 1).all()) and bool((tokens[u > 1 - probs[4] * 0.99] == 4).all())
    # top-k filtering reaches the sampler: only the two best remain.
    top2 = sample_tokens(logits.expand(n, -1), seeds, 3, SamplingParams(max_new_tokens=1, top_k=2))
    assert set(top2.tolist()) == {3, 4}


def test_filter_logits():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    assert torch.isinf(filter_logits(logits, top_k=2)).tolist() == [[False, False, True, True]]
    probs = torch.softmax(logits, -1)[0]  # ~ [0.64, 0.24, 0.09, 0.03]
    assert probs[0] < 0.7 < probs[0] + probs[1]
    assert torch.isinf(filter_logits(logits, top_p=0.7)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, top_p=0.5)).tolist() == [[False, True, True, True]]
    assert not torch.isinf(filter_logits(logits, top_k=-1, top_p=1.0)).any()


def test_vllm_is_not_imported_by_the_module():
    import sys

    import engine.rollout.backends  # noqa: F401  (it imports engine.rollout.vllm)

    assert "vllm" not in sys.modules
