"""Quantities computed from LM logits: per-token entropy and sampled-token log-probs."""

from __future__ import annotations

import torch


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution given by `logits`, over the last dimension.

    `H = logsumexp(z) - sum_v softmax(z)_v z_v`, which equals `-sum p log p` but never takes the log
    of a probability that underflowed to 0.

    Args:
        logits: `(batch, response_len, vocab)` (any leading shape).

    Returns:
        `(batch, response_len)`.
    """
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def log_probs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of `labels` under `logits`: `z[label] - logsumexp(z)`.

    Gathers one logit per position instead of building a `(..., vocab)` log-softmax, so the only
    vocab-sized temporary is inside `logsumexp`. Pass float32 logits when precision matters: the
    result has the logits' dtype.

    Args:
        logits: `(batch, response_len, vocab)` (any leading shape).
        labels: `(batch, response_len)` integer token ids.

    Returns:
        `(batch, response_len)`.
    """
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)
