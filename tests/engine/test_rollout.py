"""engine.rollout: the hf backend (KV-cache sampling, EOS, greedy parity with transformers) and the
counter-based sampler."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.config import ModelConfig
from engine.data import load_rows, tokenize_prompts
from engine.rollout import (
    HFRollout,
    SamplingParams,
    eos_token_ids,
    filter_logits,
    make_rollout,
    row_seed,
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


def test_gumbel_sampling_follows_softmax():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    n = 20000
    seeds = torch.tensor([row_seed(1, i) for i in range(n)])
    tokens = sample_tokens(logits.expand(n, -1), seeds, 0, SamplingParams(max_new_tokens=1, temperature=1.0))
    freq = torch.bincount(tokens, minlength=4).float() / n
    torch.testing.assert_close(freq, torch.softmax(logits, -1), atol=0.015, rtol=0.0)
    hot = sample_tokens(logits.expand(n, -1), seeds, 0, SamplingParams(max_new_tokens=1, temperature=0.5))
    assert (hot == 0).float().mean() > freq[0]


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

    import engine.rollout  # noqa: F401

    assert "vllm" not in sys.modules


def test_vllm_backend_against_a_fake_engine(monkeypatch, policy):
    """The vllm backend's calls (sampling params, per-row seeds, weight and adapter sync), checked
    against a stand-in for the `vllm` package (the real one needs a GPU)."""
    import sys
    import types

    from peft import LoraConfig, get_peft_model

    from engine.rollout import VLLMRollout

    calls: dict[str, list] = {"init": [], "generate": [], "load_weights": [], "lora": []}

    class FakeModel:
        def load_weights(self, weights):
            calls["load_weights"].append([name for name, _ in weights])

    class FakeLLM:
        def __init__(self, **kwargs):
            calls["init"].append(kwargs)
            runner = types.SimpleNamespace(model=FakeModel())
            worker = types.SimpleNamespace(worker=types.SimpleNamespace(model_runner=runner))
            self.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(driver_worker=worker))

        def generate(self, prompts, sampling, lora_request=None, use_tqdm=True):
            calls["generate"].append((prompts, sampling, lora_request))
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=p["prompt_token_ids"][::-1])])
                    for p in prompts]

    def lora_request(name, lora_id, path):
        calls["lora"].append((name, lora_id, path))
        return (name, lora_id, path)

    vllm = types.ModuleType("vllm")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = lambda **kw: kw
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = lora_request
    for name, module in {"vllm": vllm, "vllm.inputs": inputs, "vllm.lora": lora, "vllm.lora.request": request}.items():
        monkeypatch.setitem(sys.modules, name, module)

    model = policy[0]
    backend = VLLMRollout("/models/policy", dtype="float32", lora_rank=0, max_model_len=64, seed=3)
    assert calls["init"][0]["model"] == "/models/policy" and not calls["init"][0]["enable_lora"]
    out = backend.generate([[1, 2, 3], [4]], [11, 12], SamplingParams(max_new_tokens=5, do_sample=False))
    assert out == [[3, 2, 1], [4]]
    sampling = calls["generate"][0][1]
    assert [s["seed"] for s in sampling] == [11, 12] and all(s["temperature"] == 0.0 for s in sampling)
    assert all(s["max_tokens"] == 5 and s["top_k"] == -1 for s in sampling)
    backend.sync_weights(model)
    assert calls["load_weights"][0] == list(model.state_dict())

    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    try:
        backend = VLLMRollout("/models/policy", dtype="float32", lora_rank=4, max_model_len=64, seed=3)
        assert calls["init"][1]["enable_lora"]
        backend.sync_weights(peft_model)
        backend.sync_weights(peft_model)
        assert [c[1] for c in calls["lora"]] == [1, 2]  # a new adapter version after each update
        assert all((Path(c[2]) / "adapter_config.json").is_file() for c in calls["lora"])
        assert len(calls["load_weights"]) == 1  # adapter only: no full weight push
        backend.generate([[1]], [0], SamplingParams(max_new_tokens=2))
        assert calls["generate"][-1][2] == calls["lora"][-1]
    finally:
        peft_model.unload()
