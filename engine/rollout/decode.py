"""Lean KV-cache decoding for Llama-family decoders: prefill and one-token steps as plain torch ops
over the model's own modules, for `engine.rollout.hf.HFRollout`.

Why: on a small model a decode step of the transformers forward is mostly per-op overhead (module
calls, a causal mask built every step, cache bookkeeping, rotary recomputed, output dataclasses):
about 17 ms for a 64-row step of the demo model whose arithmetic takes about 1 ms. Here everything
that does not change during a generation is computed once (the additive padding mask, cos/sin of
every position a step will use, `(batch, kv_heads, length, head_dim)` key/value buffers), and a step
is about twenty ops per layer.

Supported: `LlamaForCausalLM`, `Qwen2ForCausalLM` and `MistralForCausalLM` (structurally the same:
RMSNorm, q/k/v/o projections with or without bias, grouped-query attention, rotary embeddings, a
SiLU-gated MLP) with full attention everywhere (no sliding window), a rotary embedding whose
frequencies are fixed at load time, plain or PEFT-wrapped (LoRA and other adapters that replace
modules: the projections are called as modules, so adapters apply). Anything else, and any model
with forward hooks (FSDP, offloading) or sharded parameters, is refused by `unsupported`; the caller
then runs the transformers forward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}
_STATIC_ROPE = {"default", "linear", "llama3", "yarn"}
"""Rope types whose `inv_freq` and `attention_scaling` are fixed at load time (`dynamic` and
`longrope` recompute them from the sequence length inside the forward)."""
_GRAD_ONLY_HOOKS = {"make_inputs_require_grads", "make_inputs_require_grad"}
"""Embedding-output hooks that transformers (`enable_input_require_grads`, set with gradient
checkpointing) and peft add so checkpointed layers get gradients; without autograd they do nothing."""
_LAYER_PARTS = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
_ATTN_PARTS = {"q_proj", "k_proj", "v_proj", "o_proj"}
_MLP_PARTS = {"gate_proj", "up_proj", "down_proj", "act_fn"}


def _base(model: nn.Module) -> nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def unsupported(model: nn.Module) -> str | None:
    """Why `Decoder` cannot run `model` (plain or PEFT-wrapped), or None when it can."""
    peft_config = getattr(model, "active_peft_config", None)
    if peft_config is not None and getattr(peft_config, "is_prompt_learning", False):
        return "prompt-learning adapters change the inputs"
    base = _base(model)
    config = getattr(base, "config", None)
    model_type = getattr(config, "model_type", None)
    if _CLASSES.get(model_type) != type(base).__name__:
        return f"{type(base).__name__} ({model_type}) is not a supported decoder"
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    if getattr(config, "sliding_window", None) is not None:
        return "sliding-window attention"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return "layers other than full attention"
    if getattr(config, "hidden_act", None) != "silu":
        return f"activation {getattr(config, 'hidden_act', None)!r}"
    inner = getattr(base, "model", None)
    if not all(hasattr(inner, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")) \
            or not hasattr(base, "lm_head"):
        return "unexpected module layout"
    rope_type = getattr(inner.rotary_emb, "rope_type", None)
    if rope_type not in _STATIC_ROPE or not hasattr(inner.rotary_emb, "inv_freq"):
        return f"rope type {rope_type!r}"
    for layer in inner.layers:
        parts = {name for name, _ in layer.named_children()}
        if parts != _LAYER_PARTS \
                or {name for name, _ in layer.self_attn.named_children()} != _ATTN_PARTS \
                or {name for name, _ in layer.mlp.named_children()} != _MLP_PARTS:
            return "unexpected decoder-layer layout"
        norms = (layer.input_layernorm, layer.post_attention_layernorm)
        if not all(type(n).__name__.endswith("RMSNorm") and hasattr(n, "variance_epsilon") for n in norms):
            return "unexpected normalisation"
    if not (type(inner.norm).__name__.endswith("RMSNorm") and hasattr(inner.norm, "variance_epsilon")):
        return "unexpected normalisation"
    for module in model.modules():
        # Forward hooks (FSDP's unsharding, accelerate's offloading) would be skipped by direct calls.
        hooks = [h for h in module._forward_hooks.values() if getattr(h, "__name__", "") not in _GRAD_ONLY_HOOKS]
        if hooks or module._forward_pre_hooks or hasattr(module, "_hf_hook"):
            return f"forward hooks on {type(module).__name__}"
    for p in model.parameters():
        if type(p) is not nn.Parameter and type(p) is not torch.Tensor:  # DTensor and other wrappers
            return f"{type(p).__name__} parameters"
    return None


def supports(model: nn.Module) -> bool:
    """True when `Decoder(model)` gives its transformers forward's logits (to float rounding)."""
    return unsupported(model) is None


def _linear(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """A plain `nn.Linear` on its weights (no module-call overhead; `weight_major` for a decode
    step's rows); anything else (a LoRA-wrapped linear) as the module itself, so its adapters apply."""
    if type(module) is nn.Linear:
        weight, bias = module.weight, module.bias
        return lambda x: weight_major(x, weight, bias) if x.dim() == 2 and x.is_cpu else F.linear(x, weight, bias)
    return module


def weight_major(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` for `x` `(rows, in)` as `(weight @ x.T).T` (a transposed view).

    Why: with a few rows (a decode step), CPU BLAS computing `x @ weight.T` repacks the whole weight
    on every call; with the weight as the left operand it streams it once. On `bench.datasets`' wide
    Llama a 16-row generation took 0.87 s instead of 1.27 s, the same tokens sampled; on the demo
    model (weights that stay in cache) and at 64 rows about the same time."""
    out = torch.mm(weight, x.t()) if bias is None else torch.addmm(bias[:, None], weight, x.t())
    return out.t()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's RMSNorm, in the same op order (statistics in float32, scaled in the input dtype)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def swap_halves(x: torch.Tensor) -> torch.Tensor:
    """`(..., d)` -> `(..., d)` with the two halves of the last dim exchanged (a `cat`: on CPU about a
    third of `flip`'s time, forward and backward)."""
    half = x.shape[-1] // 2
    return torch.cat((x[..., half:], x[..., :half]), dim=-1)


class _Layer:
    """One decoder layer's weights and callables, and its key/value buffers during a generation."""

    def __init__(self, layer: nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.ln1, self.eps1 = layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon
        self.ln2, self.eps2 = layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon
        self.q, self.k, self.v, self.o = (_linear(m) for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj))
        self.gate, self.up, self.down = (_linear(m) for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))


class Decoder:
    """One generation's prefill and decode steps for a model `supports` accepts.

    Usage: `logits = d.prefill(input_ids, attention_mask, max_new_tokens)`, then `logits = d.step(tokens)`
    up to `max_new_tokens - 1` times; each returns the next-token logits `(batch, vocab)`, in the
    dtype the model's `lm_head` gives. Call under `torch.inference_mode()` (or `no_grad`).
    """

    def __init__(self, model: nn.Module) -> None:
        base = _base(model)
        inner = base.model
        attn = inner.layers[0].self_attn
        config = base.config
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = attn.head_dim
        self.scale = float(attn.scaling)
        self.embed = inner.embed_tokens
        self.layers = [_Layer(layer) for layer in inner.layers]
        self.norm, self.norm_eps = inner.norm.weight, inner.norm.variance_epsilon
        self.lm_head = _linear(base.lm_head)
        self.inv_freq = inner.rotary_emb.inv_freq
        self.rope_scale = float(inner.rotary_emb.attention_scaling)
        self.t = 0

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        if type(self.embed) is nn.Embedding:
            return F.embedding(ids, self.embed.weight)
        return self.embed(ids)

    def rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-folded sin, `(*positions.shape, head_dim)`: transformers' rotary embedding
        (same float32 arithmetic, cast to the hidden dtype) with rotate_half's negation moved into sin,
        so `x * cos + swap_halves(x) * sin` equals its `x * cos + rotate_half(x) * sin` bit for bit."""
        freqs = positions[..., None].float() * self.inv_freq.to(device=positions.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.rope_scale).to(dtype)
        sin = (emb.sin() * self.rope_scale).to(dtype)
        half = self.head_dim // 2
        return cos, torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)

    @torch.inference_mode()
    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Run the left-padded prompts `(batch, width)` and allocate the cache for `max_new_tokens`.
        Identical rows (GRPO samples each prompt `rollout.n` times) are computed once.

        Returns:
            `(batch, vocab)` logits of the next token after each prompt.
        """
        batch, width = input_ids.shape
        device = input_ids.device
        length = width + max_new_tokens
        kvh, hd = self.kv_heads, self.head_dim
        unique, inverse = torch.unique(torch.cat([input_ids, attention_mask], dim=1), dim=0, return_inverse=True)
        if len(unique) == batch:
            unique, inverse = None, None
        ids, mask = (input_ids, attention_mask) if unique is None else (unique[:, :width], unique[:, width:])
        hidden, kv = self.prefill_hidden(ids, mask)
        expand = (lambda t: t) if inverse is None else (lambda t: t.index_select(0, inverse))
        # Under autocast, attention reads keys and values in the autocast dtype: store them in it (the
        # rounding autocast would otherwise apply to the whole cache at every step, done once).
        cast = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None
        for layer, (k, v) in zip(self.layers, kv, strict=True):
            layer.keys = torch.empty(batch, kvh, length, hd, dtype=cast or k.dtype, device=device)
            layer.values = torch.empty(batch, kvh, length, hd, dtype=cast or v.dtype, device=device)
            layer.keys[:, :, :width] = expand(k)
            layer.values[:, :, :width] = expand(v)
            layer.keys_t = layer.keys.view(batch * kvh, length, hd).transpose(1, 2)
            layer.values_3d = layer.values.view(batch * kvh, length, hd)
        # float32: batched matmuls (faster than CPU SDPA for one query); bf16/fp16: SDPA, which is
        # much faster there than low-precision bmm and, like transformers, keeps scores in float32.
        self.sdpa = not (self.layers[0].keys.dtype == self.layers[0].values.dtype == torch.float32)
        # Additive key mask: -inf on padding, 0 on real prompt tokens and on every generated slot
        # (a step attends to the filled prefix only); `(batch, 1, 1, length)` for SDPA, else
        # `(batch * kv_heads, 1, length)`.
        keys_valid = torch.cat([attention_mask.bool(), attention_mask.new_ones(batch, max_new_tokens, dtype=torch.bool)],
                               dim=1)
        mask = torch.zeros(batch, 1, length, dtype=self.layers[0].keys.dtype if self.sdpa else kv[0][0].dtype,
                           device=device).masked_fill_(~keys_valid[:, None], float("-inf"))
        self.mask = mask[:, None] if self.sdpa else mask.repeat_interleave(kvh, dim=0)
        # Step t feeds the token sampled at t: position last + 1 + t, cache slot width + t.
        last = attention_mask.long().sum(-1, keepdim=True) - 1
        step_pos = last.clamp(min=0) + 1 + torch.arange(max_new_tokens, device=device)
        step_cos, step_sin = self.rotary(step_pos.T.contiguous(), hidden.dtype)  # (steps, batch, hd)
        self.step_cos, self.step_sin = step_cos[:, :, None], step_sin[:, :, None]
        self.batch, self.width, self.t = batch, width, 0
        return expand(self.lm_head(rms_norm(hidden, self.norm, self.norm_eps)))

    def prefill_hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor
                 ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The decoder over `(rows, width)` left-padded prompts: (last position's hidden state
        `(rows, hidden)`, per layer the rotated keys and the values `(rows, kv_heads, width, head_dim)`)."""
        width = input_ids.shape[1]
        valid = attention_mask.bool()
        x = self.embed_ids(input_ids)
        cos, sin = self.rotary((attention_mask.long().cumsum(-1) - 1).clamp(min=0), x.dtype)
        cos, sin = cos[:, None], sin[:, None]  # (rows, 1, width, hd)
        # Causal over real keys; a query also sees itself, so all-padding rows stay finite.
        idx = torch.arange(width, device=x.device)
        allowed = (idx[:, None] >= idx[None, :]) & (valid[:, None, :] | (idx[:, None] == idx[None, :]))
        mask = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill_(~allowed, float("-inf"))
        mask = mask[:, None]  # (rows, 1, width, width)
        kv = []
        for layer in self.layers:
            x, k, v = self.layer_forward(layer, x, cos, sin, mask)
            kv.append((k, v))
        return x[:, -1], kv

    def layer_forward(self, layer: _Layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                      past: tuple[torch.Tensor, torch.Tensor] | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decoder layer over `x` `(rows, width, hidden)`, with cos/sin `(rows, 1, width, hd)` and an
        additive `mask` `(rows, 1, width, keys)`; `past`: rotated keys and values `(rows, kv_heads, p, hd)`
        the queries also attend to, ahead of their own (keys = p + width). Returns the new `x` and this
        call's own rotated keys and values `(rows, kv_heads, width, hd)`."""
        batch, width = x.shape[:2]
        kvh, group, hd = self.kv_heads, self.heads // self.kv_heads, self.head_dim
        h = rms_norm(x, layer.ln1, layer.eps1)
        q = layer.q(h).view(batch, width, self.heads, hd).transpose(1, 2)
        k = layer.k(h).view(batch, width, kvh, hd).transpose(1, 2)
        v = layer.v(h).view(batch, width, kvh, hd).transpose(1, 2)
        q = q * cos + swap_halves(q) * sin
        new_k = k = k * cos + swap_halves(k) * sin
        new_v = v
        if past is not None:
            k = torch.cat([past[0].to(k.dtype), k], dim=2)
            v = torch.cat([past[1].to(v.dtype), v], dim=2)
        if group > 1:
            length = k.shape[2]
            k = k[:, :, None].expand(batch, kvh, group, length, hd).reshape(batch, self.heads, length, hd)
            v = v[:, :, None].expand(batch, kvh, group, length, hd).reshape(batch, self.heads, length, hd)
        # The mask holds only 0 and -inf, exact in any float dtype: cast to the queries' (autocast) one.
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), scale=self.scale)
        x = x + layer.o(out.transpose(1, 2).reshape(batch, width, self.heads * hd))
        h = rms_norm(x, layer.ln2, layer.eps2)
        return x + layer.down(F.silu(layer.gate(h)) * layer.up(h)), new_k, new_v

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row `(batch,)`; returns the next-token logits `(batch, vocab)`."""
        t, batch, heads, kvh, hd = self.t, self.batch, self.heads, self.kv_heads, self.head_dim
        group, slot = heads // kvh, self.width + t
        filled = slot + 1
        cos, sin = self.step_cos[t], self.step_sin[t]  # (batch, 1, hd)
        mask = self.mask[..., :filled]
        x = self.embed_ids(tokens)
        for layer in self.layers:
            h = rms_norm(x, layer.ln1, layer.eps1)
            qk = torch.cat((layer.q(h), layer.k(h)), dim=-1).view(batch, heads + kvh, hd)
            qk = qk * cos + swap_halves(qk) * sin
            layer.keys.select(2, slot).copy_(qk[:, heads:])
            layer.values.select(2, slot).copy_(layer.v(h).view(batch, kvh, hd))
            if self.sdpa:  # the query heads of a group as SDPA's query positions: no repeated keys
                out = F.scaled_dot_product_attention(
                    qk[:, :heads].view(batch, kvh, group, hd), layer.keys[:, :, :filled],
                    layer.values[:, :, :filled], attn_mask=mask, scale=self.scale).view(batch, heads * hd)
            else:
                q = qk[:, :heads].reshape(batch * kvh, group, hd)
                scores = torch.baddbmm(mask, q, layer.keys_t[:, :, :filled], alpha=self.scale)
                probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
                out = torch.bmm(probs, layer.values_3d[:, :filled]).view(batch, heads * hd)
            x = x + layer.o(out)
            h = rms_norm(x, layer.ln2, layer.eps2)
            x = x + layer.down(F.silu(layer.gate(h)) * layer.up(h))
        self.t = t + 1
        return self.lm_head(rms_norm(x, self.norm, self.norm_eps))

