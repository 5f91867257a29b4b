"""Next tokens for a running batch whose rows each have their own temperature, top-p, seed and step.

The draw is `engine.rollout.sampling`'s counter-based inverse CDF with per-row parameters: row `i`
draws at its own step `t` from the uniform that hashes (`seeds[i]`, `t`), so a choice's tokens depend
only on its seed and logits, never on the other requests that share the step.
"""

from __future__ import annotations

import torch

from engine.rollout.sampling import M32, mix32


def uniforms(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """`engine.rollout.sampling.row_uniforms` with one step per row."""
    key = mix32((mix32(seeds & M32) + steps * 0x9E3779B) & M32)
    return key.double().add_(0.5).div_(2.0**32)


def sample(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, seeds: torch.Tensor,
           steps: torch.Tensor) -> torch.Tensor:
    """`(rows,)` tokens: argmax where `temperature <= 0`, else a draw from softmax(logits / T) within
    the row's top-p nucleus."""
    greedy = logits.argmax(dim=-1)
    sampled_rows = temperature > 0
    if not bool(sampled_rows.any()):
        return greedy
    scaled = logits.float() / temperature.clamp(min=1e-6)[:, None]
    sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    # Drop a token when the mass strictly before it already reaches top_p (the first always stays).
    drop_sorted = (torch.cumsum(probs, dim=-1) - probs) >= top_p[:, None]
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    scaled = scaled.masked_fill(drop, float("-inf"))
    cdf = torch.softmax(scaled, dim=-1).cumsum(dim=-1, dtype=torch.float64)
    target = uniforms(seeds, steps).mul_(cdf[:, -1])
    drawn = torch.searchsorted(cdf, target[:, None], right=True)[:, 0].clamp_(max=logits.shape[-1] - 1)
    return torch.where(sampled_rows, drawn, greedy)
