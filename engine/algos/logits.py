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
    return _entropy(logits, torch.logsumexp(logits, dim=-1))


def _entropy(logits: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    # vecdot: one pass over the vocabulary instead of a product tensor and a sum.
    return lse - torch.linalg.vecdot(torch.softmax(logits, dim=-1), logits)


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


def log_probs_and_entropy(logits: torch.Tensor, labels: torch.Tensor, *,
                          entropy_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """`(log_probs_from_logits(logits, labels), entropy_from_logits(logits))` with one `logsumexp`
    for both (the vocab-sized reductions are most of their cost).

    Args:
        logits: `(batch, response_len, vocab)` (any leading shape).
        labels: `(batch, response_len)` integer token ids.
        entropy_grad: False computes the entropy detached (a metric: backward stores nothing for
            it); the log-probs keep their graph either way.

    Returns:
        `(log_probs, entropy)`, both `(batch, response_len)`.
    """
    lse = torch.logsumexp(logits, dim=-1)
    log_probs = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - lse
    if entropy_grad:
        return log_probs, _entropy(logits, lse)
    with torch.no_grad():
        return log_probs, _entropy(logits.detach(), lse.detach())
