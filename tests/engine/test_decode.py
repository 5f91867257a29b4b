"""engine.rollout.decode: the lean decode path gives the transformers forward's logits at every step and the
hf rollout's exact samples, for the models it takes (Llama, GQA + bias Qwen2, rope variants, LoRA),
and every model it refuses falls back to the transformers forward."""

from __future__ import annotations

import pytest
import torch

from engine.config import ModelConfig
from engine.data import load_rows, pad, tokenize_prompts
from engine.models import load_policy, load_tokenizer, reference_mode
from engine.rollout import decode
from engine.rollout.hf import HFRollout
from engine.rollout.sampling import SamplingParams, mix32, row_seed, row_uniforms
from engine.runtime.precision import autocast

VOCAB, PAD = 97, 0
PLAIN = ModelConfig(use_remove_padding=False)


def tiny(kind: str = "llama", seed: int = 0, **overrides):
    """A seeded 2-layer decoder of `kind` (`llama`, `qwen2`, `mistral`) with 4 query and 2 key/value
    heads; a large init scale gives peaked logits, so greedy picks have clear margins."""
    import transformers

    classes = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "mistral": ("MistralConfig", "MistralForCausalLM")}
    config_cls, model_cls = (getattr(transformers, n) for n in classes[kind])
    kwargs = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
              "initializer_range": 0.2, "pad_token_id": PAD, "bos_token_id": 1, "eos_token_id": 2,
              "tie_word_embeddings": False}
    if kind == "mistral":
        kwargs["sliding_window"] = None
    kwargs.update(overrides)
    torch.manual_seed(seed)
    model = model_cls(config_cls(**kwargs))
    with torch.no_grad():  # transformers zero-initialises biases; make them count
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.5)
    return model.eval()


def prompts_of(lengths: list[int], seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [[1] + torch.randint(3, VOCAB, (n - 1,), generator=g).tolist() for n in lengths]


MIXED = prompts_of([1, 3, 37, 12, 60])
MIXED = MIXED + [MIXED[2], MIXED[0]]  # duplicates: the prefill computes them once


def reference_logits(model, seqs: list[list[int]], pad_id: int) -> torch.Tensor:
    """Next-token logits `(rows, vocab)` from one full transformers forward without a cache."""
    ids, mask = pad(seqs, pad_id, side="left")
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]


def assert_stepwise_logits(model, prompts, pad_id: int, steps: int = 6, atol: float = 1e-4) -> None:
    """Greedy decode with `decode.Decoder`; at every step its logits equal a cache-free forward over
    the prompt and the tokens so far."""
    assert decode.unsupported(model) is None
    seqs = [list(p) for p in prompts]
    ids, mask = pad(prompts, pad_id, side="left")
    decoder = decode.Decoder(model)
    with torch.no_grad():
        logits = decoder.prefill(ids, mask, steps)
        for t in range(steps):
            ref = reference_logits(model, seqs, pad_id)
            torch.testing.assert_close(logits, ref, atol=atol, rtol=0.0, msg=f"step {t}")
            token = ref.argmax(-1)
            for s, tok in zip(seqs, token.tolist(), strict=True):
                s.append(tok)
            if t < steps - 1:
                logits = decoder.step(token)


@pytest.fixture
def calls(monkeypatch):
    """How often the lean path ran: `calls["lean"]` counts `decode.Decoder.prefill` calls."""
    counts = {"lean": 0}
    original = decode.Decoder.prefill

    def counted(self, *args, **kwargs):
        counts["lean"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(decode.Decoder, "prefill", counted)
    return counts


def generate(model, prompts, params, *, lean: bool, eos=(2,), seeds=None, pad_id=PAD):
    seeds = seeds if seeds is not None else [row_seed(7, i) for i in range(len(prompts))]
    return HFRollout(model, pad_id, list(eos), lean=lean).generate(prompts, seeds, params)


@pytest.fixture(scope="module")
def demo(demo_assets):
    torch.set_num_threads(1)
    tokenizer = load_tokenizer(demo_assets["model"])
    rows = load_rows(demo_assets["prompts_train"], "prompts")[:4]
    prompts = [p.prompt_ids for p in tokenize_prompts(rows, tokenizer, 64, "error")]
    prompts += [prompts[0][:3], prompts[1] + prompts[2] + prompts[3]]  # very different lengths
    return demo_assets["model"], tokenizer, prompts


# --- logits ------------------------------------------------------------------------------------------

def test_demo_llama_logits_match_at_every_step(demo):
    path, tokenizer, prompts = demo
    model = load_policy(path, PLAIN).eval()
    assert_stepwise_logits(model, prompts + [prompts[1]], tokenizer.pad_token_id, steps=8)


@pytest.mark.parametrize("kind, overrides", [
    ("llama", {}),
    ("llama", {"attention_bias": True, "mlp_bias": True, "num_key_value_heads": 1}),
    ("qwen2", {}),  # q/k/v bias, o without
    ("mistral", {"num_key_value_heads": 4, "tie_word_embeddings": True}),
    ("llama", {"head_dim": 32}),  # head_dim * heads != hidden
    ("llama", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}),
    ("llama", {"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
                                   "rope_theta": 500000.0}}),
    ("llama", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                                   "rope_theta": 10000.0}}),
])
def test_variants_logits_match_at_every_step(kind, overrides):
    assert_stepwise_logits(tiny(kind, **overrides), MIXED, PAD, steps=6)


def test_lora_policy_logits_match_with_and_without_the_adapter(demo):
    path, tokenizer, prompts = demo
    model = load_policy(path, ModelConfig(lora_rank=4, lora_alpha=8, use_remove_padding=False)).eval()
    with torch.no_grad():  # lora_B starts at zero; give the adapter an effect
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)
    assert decode.supports(model)
    assert_stepwise_logits(model, prompts, tokenizer.pad_token_id)
    with reference_mode(model):
        assert_stepwise_logits(model, prompts, tokenizer.pad_token_id)
    ids, mask = pad(prompts, tokenizer.pad_token_id, side="left")
    with torch.no_grad():
        adapted = decode.Decoder(model).prefill(ids, mask, 1)
        with reference_mode(model):
            base = decode.Decoder(model).prefill(ids, mask, 1)
    assert (adapted - base).abs().max() > 0.1  # the adapter is applied, not skipped


@pytest.mark.parametrize("mode", ["bfloat16 weights", "float32 under bf16 autocast"])
def test_bfloat16_logits_match_at_every_step(mode):
    """Within one bf16 step of the logits' magnitude (|logits| < 8 here: 1/32) at every step; the
    autocast case is how the actor samples with `model.dtype: bfloat16` (float32 masters)."""
    model = tiny("qwen2")
    if mode == "bfloat16 weights":
        model = model.to(torch.bfloat16)
        assert_stepwise_logits(model, MIXED, PAD, atol=1 / 32)
    else:
        with autocast("cpu", "bfloat16"):
            assert_stepwise_logits(model, MIXED, PAD, atol=1 / 32)


def test_bfloat16_demo_policy_samples(demo, calls):
    path, tokenizer, prompts = demo
    bf16 = load_policy(path, ModelConfig(dtype="bfloat16", use_remove_padding=False), trainable=False)
    assert next(bf16.parameters()).dtype == torch.bfloat16
    ids, mask = pad(prompts, tokenizer.pad_token_id, side="left")
    with torch.no_grad():
        lean = decode.Decoder(bf16).prefill(ids, mask, 1)
        ref = reference_logits(bf16, prompts, tokenizer.pad_token_id)
    assert lean.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(lean.float(), ref.float(), atol=1 / 64, rtol=0.0)
    params = SamplingParams(max_new_tokens=6)
    out = generate(bf16, prompts, params, lean=True, eos=[tokenizer.eos_token_id], pad_id=tokenizer.pad_token_id)
    assert calls["lean"] == 2  # the prefill above, then the rollout's
    assert all(1 <= len(r) <= 6 for r in out)


def test_gradient_checkpointing_policy_takes_the_lean_path(demo, calls):
    """Gradient checkpointing adds an embedding-output hook for autograd only: not a reason to refuse."""
    path, tokenizer, prompts = demo
    model = load_policy(path, ModelConfig(enable_gradient_checkpointing=True, lora_rank=4))
    assert model.get_base_model().model.embed_tokens._forward_hooks
    params = SamplingParams(max_new_tokens=8)
    eos, pad_id = [tokenizer.eos_token_id], tokenizer.pad_token_id
    assert generate(model, prompts, params, lean=True, eos=eos, pad_id=pad_id) == \
        generate(model, prompts, params, lean=False, eos=eos, pad_id=pad_id)
    assert calls["lean"] == 1


# --- samples through HFRollout ---------------------------------------------------------------------------

@pytest.mark.parametrize("params", [
    SamplingParams(max_new_tokens=10, do_sample=False),
    SamplingParams(max_new_tokens=10, temperature=1.0),
    SamplingParams(max_new_tokens=10, temperature=0.7, top_p=0.9, top_k=20),
], ids=["greedy", "sampled", "filtered"])
def test_rollout_samples_equal_the_hf_path(demo, calls, params):
    path, tokenizer, prompts = demo
    model = load_policy(path, ModelConfig())  # packed attention, train mode: as the actor holds it
    eos, pad_id = [tokenizer.eos_token_id], tokenizer.pad_token_id
    hf = generate(model, prompts, params, lean=False, eos=eos, pad_id=pad_id)
    assert calls["lean"] == 0
    lean = generate(model, prompts, params, lean=True, eos=eos, pad_id=pad_id)
    assert calls["lean"] == 1
    assert lean == hf
    assert model.training


@pytest.mark.parametrize("kind", ["qwen2", "lora"])
def test_rollout_samples_equal_the_hf_path_for_gqa_and_lora(calls, kind):
    model = tiny("qwen2")
    if kind == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(tiny("llama"), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.3)
    for params in (SamplingParams(max_new_tokens=12, do_sample=False), SamplingParams(max_new_tokens=12)):
        hf = generate(model, MIXED, params, lean=False)
        lean = generate(model, MIXED, params, lean=True)
        assert lean == hf
    assert calls["lean"] == 2


def test_early_eos_in_some_rows(calls):
    model = tiny("llama", seed=3)
    params = SamplingParams(max_new_tokens=12, do_sample=False)
    free = generate(model, MIXED, params, lean=False, eos=[VOCAB + 1])  # never produced: full length
    # A token some row produces mid-response (and some other row never does) as EOS: rows stop at
    # different steps, and stopped rows are fed padding while the others go on.
    counts = {}
    for row in free:
        for tok in set(row[1:-1]):
            counts[tok] = counts.get(tok, 0) + 1
    eos = next(tok for tok, n in sorted(counts.items(), key=lambda kv: -kv[1]) if n < len(free))
    hf = generate(model, MIXED, params, lean=False, eos=[eos])
    lean = generate(model, MIXED, params, lean=True, eos=[eos])
    assert lean == hf
    assert calls["lean"] == 1
    lengths = {len(r) for r in lean}
    assert min(lengths) < 12 and max(lengths) == 12
    assert all(r[-1] == eos for r in lean if len(r) < 12)
    # everything stops at the first step: one prefill, no decode step
    first = {r[0] for r in free}
    assert generate(model, MIXED, params, lean=True, eos=sorted(first)) == [[r[0]] for r in free]


# --- fallback ------------------------------------------------------------------------------------------

def _hooked():
    model = tiny("llama")
    model.model.layers[0].mlp.register_forward_hook(lambda m, i, o: o * 2.0)
    return model


UNSUPPORTED = {
    "sliding window": lambda: tiny("mistral", sliding_window=8),
    "qwen2 sliding layers": lambda: tiny("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=1),
    "dynamic rope": lambda: tiny("llama", max_position_embeddings=16,  # rescaled beyond 16 positions
                                 rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
    "forward hook": _hooked,
    "gelu mlp": lambda: tiny("llama", hidden_act="gelu"),
}


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_models_fall_back(calls, name):
    model = UNSUPPORTED[name]()
    assert decode.unsupported(model) is not None
    prompts = prompts_of([30, 5, 18])
    params = SamplingParams(max_new_tokens=8, do_sample=False)
    # fresh models: a dynamic rope keeps state from one forward to the next
    assert generate(model, prompts, params, lean=True) == generate(UNSUPPORTED[name](), prompts, params, lean=False)
    assert calls["lean"] == 0
    model = UNSUPPORTED[name]()
    # Each refusal matters: forced onto the lean path, these models would decode differently.
    ids, mask = pad(prompts, PAD, side="left")
    with torch.no_grad():
        forced = decode.Decoder(model).prefill(ids, mask, 1)
        assert not torch.allclose(forced, reference_logits(model, prompts, PAD), atol=1e-3)


def test_decode_steps_multiply_weight_major(monkeypatch):
    """A step's projections (rows x hidden, on CPU) run as `weight @ x.T` (`decode.weight_major`: CPU
    BLAS would repack the weight per call the other way round), with and without bias, and give
    `F.linear`'s result; the prefill's 3-D inputs keep `F.linear`."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(3)
    x, w, b = (torch.randn(*s, generator=g) for s in ((5, 64), (96, 64), (96,)))
    for bias in (None, b):
        torch.testing.assert_close(decode.weight_major(x, w, bias), F.linear(x, w, bias), atol=1e-5, rtol=0.0)
    shapes: list[tuple[int, ...]] = []
    original = decode.weight_major
    monkeypatch.setattr(decode, "weight_major", lambda x, w, b: shapes.append(tuple(x.shape)) or original(x, w, b))
    model = tiny("qwen2")  # q/k/v biases
    assert_stepwise_logits(model, MIXED, PAD, steps=3)
    rows, distinct = len(MIXED), len({tuple(p) for p in MIXED})
    # The prefill's head on each distinct prompt's last token; then 2 steps, each with q, k, v, o,
    # gate, up (hidden 64 in) and down (intermediate 96 in) in each of 2 layers, and the head.
    assert sorted(shapes) == sorted([(distinct, 64)] + 2 * ((2 * 6 + 1) * [(rows, 64)] + 2 * [(rows, 96)]))


def test_other_architectures_are_refused():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2))
    assert "not a supported decoder" in decode.unsupported(gpt2)


# --- sampler ---------------------------------------------------------------------------------------------

def test_row_uniforms_are_their_definition():
    """One hash of (seed, step) per row, the midpoint of its 2**32 cell: samples depend on nothing else."""
    seeds = torch.tensor([row_seed(5, i) for i in range(16)] + [0, 2**32 - 1])
    for step in (0, 1, 17, 1000):
        key = mix32((mix32(seeds & 0xFFFFFFFF) + step * 0x9E3779B) & 0xFFFFFFFF)
        expected = (key.double() + 0.5) / 2.0**32
        u = row_uniforms(seeds, step)
        assert torch.equal(u, expected)
        assert bool((u > 0).all()) and bool((u < 1).all())
    assert not torch.equal(row_uniforms(seeds, 0), row_uniforms(seeds, 1))
