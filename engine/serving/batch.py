"""The continuous-batching model: one base Llama-family decoder, many LoRA adapters, and a slot KV cache
that sequences join and leave between decode steps.

Each running sequence owns a slot (a row of every layer's key/value buffers) and its own length; a
decode step feeds one token per slot at that slot's own position and masks every key past it. Slots
stay packed at the front (a leaving sequence's slot is refilled by the last one), so a step reads
plain views of the buffers. LoRA is applied per row: every projection computes the base product for
the whole batch once and each adapter present adds `scale * B(A x)` on its own rows, so requests of
different adapters share one step and the base weights exist once however many adapters are loaded.

The arithmetic follows `engine.rollout.decode` (same RMSNorm, rotary and op order), which matches the
transformers forward to float rounding; models that module refuses are refused here too.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from engine.errors import EngineError
from engine.rollout.decode import rms_norm, swap_halves, unsupported, weight_major

_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_KEY = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+_proj)\.lora_([AB])\.weight$")


@dataclass
class LoraAdapter:
    """One adapter's low-rank factors by (layer, projection): `A` `(r, in)`, `B` `(out, r)`, and scale."""

    name: str
    factors: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    scale: float = 1.0

    @property
    def nbytes(self) -> int:
        return sum(a.numel() * a.element_size() + b.numel() * b.element_size() for a, b in self.factors.values())


def load_adapter(path: str, name: str, dtype: torch.dtype) -> LoraAdapter:
    """A PEFT LoRA adapter directory (`adapter_config.json`, `adapter_model.safetensors`) on the
    projections of the decoder layers; anything else it would change (embeddings, heads, DoRA,
    modules_to_save) is refused rather than silently ignored."""
    from safetensors.torch import load_file

    root = Path(path)
    if (root / "adapter" / "adapter_config.json").exists():  # a Keel LoRA model dir: merged + adapter/
        root = root / "adapter"
    try:
        config = json.loads((root / "adapter_config.json").read_text())
        tensors = load_file(str(root / "adapter_model.safetensors"))
    except (OSError, ValueError) as e:
        raise EngineError(f"{name}: not a readable LoRA adapter", code="model_not_found") from e
    if config.get("peft_type", "LORA") != "LORA" or config.get("use_dora") or config.get("modules_to_save"):
        raise EngineError(f"{name}: only plain LoRA adapters are served", code="invalid_model")
    r, alpha = int(config["r"]), float(config.get("lora_alpha", config["r"]))
    scale = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
    adapter = LoraAdapter(name=name, scale=scale)
    parts: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = _KEY.search(key)
        if match is None or match.group(2) not in _PROJ:
            raise EngineError(f"{name}: adapter weight {key} is outside the decoder projections",
                              code="invalid_model")
        parts.setdefault((int(match.group(1)), match.group(2)), {})[match.group(3)] = tensor.to(dtype)
    for where, ab in parts.items():
        adapter.factors[where] = (ab["A"].contiguous(), ab["B"].contiguous())
    return adapter


def _rows_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return weight_major(x, weight, bias) if x.is_cpu else F.linear(x, weight, bias)


class BatchModel:
    """A base model's weights with per-row LoRA and a growable slot cache.

    Usage: `logits = m.prefill(slot, ids, adapter)` puts a prompt into `slot` and returns its next-token
    logits `(vocab,)`; `m.copy_slot(src, dst, length)` shares a prefix (n choices of one prompt);
    `logits = m.step(tokens, lengths, adapters)` feeds one token to each of slots `0..len(tokens)-1`
    (row `i` at position `lengths[i]`); `m.move_slot(src, dst)` keeps slots packed.
    """

    def __init__(self, model: nn.Module) -> None:
        why = unsupported(model)
        if why is not None:
            raise EngineError(f"the CPU serving engine cannot run this model: {why}", code="invalid_model")
        config, inner = model.config, model.model
        attn = inner.layers[0].self_attn
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = attn.head_dim
        self.scale = float(attn.scaling)
        self.embed = inner.embed_tokens.weight
        self.dtype = self.embed.dtype
        self.device = self.embed.device
        self.layers = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            weights = {name: (mod.weight, mod.bias) for name, mod in
                       (("q_proj", a.q_proj), ("k_proj", a.k_proj), ("v_proj", a.v_proj), ("o_proj", a.o_proj),
                        ("gate_proj", m.gate_proj), ("up_proj", m.up_proj), ("down_proj", m.down_proj))}
            self.layers.append({"w": weights,
                                "ln1": (layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon),
                                "ln2": (layer.post_attention_layernorm.weight,
                                        layer.post_attention_layernorm.variance_epsilon)})
        self.norm = (inner.norm.weight, inner.norm.variance_epsilon)
        self.lm_head = (model.lm_head.weight, model.lm_head.bias)
        self.inv_freq = inner.rotary_emb.inv_freq.float()
        self.rope_scale = float(inner.rotary_emb.attention_scaling)
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.slots = 0
        self.length = 0

    @property
    def weight_bytes(self) -> int:
        seen, total = set(), 0
        tensors = [self.embed, self.norm[0], self.lm_head[0], self.lm_head[1]]
        for layer in self.layers:
            tensors += [t for pair in layer["w"].values() for t in pair] + [layer["ln1"][0], layer["ln2"][0]]
        for t in tensors:
            if t is not None and id(t) not in seen:
                seen.add(id(t))
                total += t.numel() * t.element_size()
        return total

    # --- cache -------------------------------------------------------------------------------------

    def reserve(self, slots: int, length: int) -> None:
        """Grow the cache (doubling) to at least `slots` rows of `length` positions, keeping its content."""
        if slots <= self.slots and length <= self.length:
            return
        new_slots = max(slots, min(2 * self.slots, 1 << 20)) if slots > self.slots else self.slots
        new_len = max(length, 2 * self.length) if length > self.length else self.length
        shape = (new_slots, self.kv_heads, new_len, self.head_dim)
        for i in range(len(self.layers)):
            k = torch.zeros(shape, dtype=self.dtype, device=self.device)
            v = torch.zeros(shape, dtype=self.dtype, device=self.device)
            if self.slots:
                k[:self.slots, :, :self.length] = self.keys[i]
                v[:self.slots, :, :self.length] = self.values[i]
            if i < len(self.keys):
                self.keys[i], self.values[i] = k, v
            else:
                self.keys.append(k)
                self.values.append(v)
        self.slots, self.length = new_slots, new_len

    def release(self) -> None:
        """Drop the cache (an idle replica keeps only its weights)."""
        self.keys, self.values, self.slots, self.length = [], [], 0, 0

    def copy_slot(self, src: int, dst: int, length: int) -> None:
        for k, v in zip(self.keys, self.values):
            k[dst, :, :length] = k[src, :, :length]
            v[dst, :, :length] = v[src, :, :length]

    def move_slot(self, src: int, dst: int, length: int) -> None:
        if src != dst:
            self.copy_slot(src, dst, length)

    # --- arithmetic --------------------------------------------------------------------------------

    def _rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-folded sin `(*positions.shape, head_dim)` (as `engine.rollout.decode.Decoder.rotary`)."""
        freqs = positions[..., None].float() * self.inv_freq.to(positions.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.rope_scale).to(self.dtype)
        sin = (emb.sin() * self.rope_scale).to(self.dtype)
        half = self.head_dim // 2
        return cos, torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)

    def _proj(self, x: torch.Tensor, layer: int, name: str, groups: list[tuple[LoraAdapter, torch.Tensor | None]]
              ) -> torch.Tensor:
        """`x` `(rows, in)` through one projection, each row with its adapter's delta (`groups`: an
        adapter and the row indices it owns, None = every row)."""
        weight, bias = self.layers[layer]["w"][name]
        y = _rows_linear(x, weight, bias)
        for adapter, rows in groups:
            ab = adapter.factors.get((layer, name))
            if ab is None:
                continue
            a, b = ab
            if rows is None:
                y = y + adapter.scale * F.linear(F.linear(x, a), b)
            else:
                y = y.index_add(0, rows, F.linear(F.linear(x.index_select(0, rows), a), b), alpha=adapter.scale)
        return y

    def _mlp_and_out(self, x: torch.Tensor, attn: torch.Tensor, i: int, groups) -> torch.Tensor:
        x = x + self._proj(attn, i, "o_proj", groups)
        ln, eps = self.layers[i]["ln2"]
        h = rms_norm(x, ln, eps)
        gated = F.silu(self._proj(h, i, "gate_proj", groups)) * self._proj(h, i, "up_proj", groups)
        return x + self._proj(gated, i, "down_proj", groups)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return _rows_linear(rms_norm(x, *self.norm), *self.lm_head)

    @torch.inference_mode()
    def prefill(self, slot: int, ids: list[int], adapter: LoraAdapter | None) -> torch.Tensor:
        """Run a prompt into `slot` (the cache must hold it: `reserve` first); next-token logits `(vocab,)`."""
        width = len(ids)
        heads, kvh, hd = self.heads, self.kv_heads, self.head_dim
        group = heads // kvh
        groups = [] if adapter is None else [(adapter, None)]
        x = F.embedding(torch.tensor(ids, device=self.device), self.embed)  # (width, hidden)
        cos, sin = self._rotary(torch.arange(width, device=self.device))  # (width, hd)
        cos, sin = cos[None], sin[None]
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, *layer["ln1"])
            q = self._proj(h, i, "q_proj", groups).view(width, heads, hd).transpose(0, 1)
            k = self._proj(h, i, "k_proj", groups).view(width, kvh, hd).transpose(0, 1)
            v = self._proj(h, i, "v_proj", groups).view(width, kvh, hd).transpose(0, 1)
            q = q * cos + swap_halves(q) * sin
            k = k * cos + swap_halves(k) * sin
            self.keys[i][slot, :, :width] = k
            self.values[i][slot, :, :width] = v
            if group > 1:
                k = k.repeat_interleave(group, dim=0)
                v = v.repeat_interleave(group, dim=0)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
            x = self._mlp_and_out(x, out.transpose(0, 1).reshape(width, heads * hd), i, groups)
        return self._logits(x[-1:])[0]

    @torch.inference_mode()
    def step(self, tokens: list[int], lengths: list[int], adapters: list[LoraAdapter | None]) -> torch.Tensor:
        """Feed `tokens[i]` to slot `i` at position `lengths[i]` (and store its key/value there).

        Returns:
            `(rows, vocab)` next-token logits.
        """
        rows = len(tokens)
        heads, kvh, hd = self.heads, self.kv_heads, self.head_dim
        group = heads // kvh
        pos = torch.tensor(lengths, device=self.device)
        filled = max(lengths) + 1
        groups = _adapter_groups(adapters, self.device)
        cos, sin = self._rotary(pos)  # (rows, hd)
        cos, sin = cos[:, None], sin[:, None]
        keys_valid = torch.arange(filled, device=self.device)[None] <= pos[:, None]
        mask = torch.zeros(rows, 1, 1, filled, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~keys_valid[:, None, None], float("-inf"))
        mask3 = mask.view(rows, 1, filled).repeat_interleave(kvh, dim=0)  # (rows * kv_heads, 1, keys)
        slot_idx = torch.arange(rows, device=self.device)
        x = F.embedding(torch.tensor(tokens, device=self.device), self.embed)  # (rows, hidden)
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, *layer["ln1"])
            q = self._proj(h, i, "q_proj", groups).view(rows, heads, hd)
            k = self._proj(h, i, "k_proj", groups).view(rows, kvh, hd)
            v = self._proj(h, i, "v_proj", groups).view(rows, kvh, hd)
            q = q * cos + swap_halves(q) * sin
            k = k * cos + swap_halves(k) * sin
            self.keys[i][slot_idx, :, pos] = k
            self.values[i][slot_idx, :, pos] = v
            keys, values = self.keys[i][:rows, :, :filled], self.values[i][:rows, :, :filled]
            if self.dtype == torch.float32:  # batched matmuls: on CPU several times SDPA's time for one query
                q3 = q.reshape(rows * kvh, group, hd)
                scores = torch.baddbmm(mask3, q3, keys.reshape(rows * kvh, filled, hd).transpose(1, 2),
                                       alpha=self.scale)
                probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
                out = torch.bmm(probs, values.reshape(rows * kvh, filled, hd))
            else:  # the query heads of a group as SDPA's query positions: keys are not repeated
                out = F.scaled_dot_product_attention(q.view(rows, kvh, group, hd), keys, values, attn_mask=mask,
                                                     scale=self.scale)
            x = self._mlp_and_out(x, out.reshape(rows, heads * hd), i, groups)
        return self._logits(x)


def _adapter_groups(adapters: list[LoraAdapter | None], device: torch.device
                    ) -> list[tuple[LoraAdapter, torch.Tensor | None]]:
    by_id: dict[int, tuple[LoraAdapter, list[int]]] = {}
    for row, adapter in enumerate(adapters):
        if adapter is not None:
            by_id.setdefault(id(adapter), (adapter, []))[1].append(row)
    if len(by_id) == 1:
        adapter, rows = next(iter(by_id.values()))
        if len(rows) == len(adapters):
            return [(adapter, None)]
    return [(a, torch.tensor(rows, device=device)) for a, rows in by_id.values()]
