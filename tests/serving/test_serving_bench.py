"""bench.serving's pieces on the demo model: both sides generate the same tokens, every request reports
a first token, and the memory figure counts the base once plus each adapter."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from bench.serving import _prompts, batched, memory, sequential
from engine.serving.engine import CpuEngine


def test_batched_and_sequential_generate_the_same_tokens(demo_assets):
    engine = CpuEngine(demo_assets["model"], max_batch=4)
    prompts = _prompts(engine, 4)
    rate, firsts, tokens = batched(engine, prompts, 8)
    model = AutoModelForCausalLM.from_pretrained(demo_assets["model"], dtype=torch.float32).eval()
    base_rate, base_tokens = sequential(model, prompts, 8, engine.tokenizer.eos_token_id)
    assert tokens == base_tokens > 0 and rate > 0 and base_rate > 0
    assert len(firsts) == 4 and all(t > 0 for t in firsts)


def test_memory_counts_the_base_once_and_each_adapter(demo_assets):
    figures = memory(demo_assets["model"], 2)
    expected = figures["base_mib"] + 2 * figures["adapter_mib_each"]
    assert abs(figures["tensors_mib"] - expected) <= 0.05 * expected
    assert figures["tensors_within_budget"]
