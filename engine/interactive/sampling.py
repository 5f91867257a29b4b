"""`sample`: draw continuations with `engine.rollout.hf.HFRollout` (KV cache, temperature, top-p, top-k,
counter-based seeds), cut them at stop strings, and score every drawn token.

Row `(prompt i, sample k)` draws with the seed `row_seed(seed, i, k)`, where `seed` is the call's
`sampling_params.seed` or, without one, `row_seed(session seed, number of earlier sample calls)`: the
same calls on the same weights draw the same tokens, whatever else shares the batch.

Two log-probs per drawn token, each from a forward over prompt + continuation:

- `logprobs`: the policy's own, `softmax(logits)` (temperature 1), exactly as `forward` computes
  them, whatever the sampling temperature: the same weights give the same numbers in both, so an
  importance-sampling ratio starts at 1.
- `sampling_logprobs`, only when sampling at a temperature other than 1 (and above 0): those of
  `softmax(logits / temperature)`, the distribution the tokens were drawn from (the `logprobs`
  input of a loss that corrects for the temperature).

Top-p / top-k filtering restricts what can be drawn but is renormalised into neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from engine.interactive.datums import SampleRequest
from engine.interactive.forward import MICRO_BATCH_TOKENS, micro_batches, token_log_probs
from engine.rollout.hf import HFRollout
from engine.rollout.sampling import SamplingParams, row_seed
from engine.runtime.precision import Precision

SAMPLE_BATCH_ROWS = 64
"""Rows generated together (one KV cache)."""


def eos_ids(model: nn.Module, tokenizer: Any) -> set[int]:
    """Tokens that end a continuation: the tokenizer's EOS and the generation config's."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    config = getattr(model, "generation_config", None)
    extra = getattr(config, "eos_token_id", None)
    if extra is not None:
        ids |= set(extra) if isinstance(extra, list) else {extra}
    return {int(i) for i in ids}


def _cut_at_stop(tokens: list[int], stops: Sequence[str], tokenizer: Any) -> int | None:
    """The shortest prefix length whose text contains a stop string, or None."""
    def hit(n: int) -> bool:
        text = tokenizer.decode(tokens[:n], skip_special_tokens=False)
        return any(s in text for s in stops)

    if not stops or not hit(len(tokens)):
        return None
    low, high = 1, len(tokens)
    while low < high:  # a longer prefix never loses a stop string its shorter prefix holds
        mid = (low + high) // 2
        if hit(mid):
            high = mid
        else:
            low = mid + 1
    return low


def sample(model: nn.Module, tokenizer: Any, request: SampleRequest, prompts: Sequence[list[int]], *,
           base_seed: int, device: torch.device, precision: Precision) -> dict[str, Any]:
    """Generate `request.num_samples` continuations of each of `prompts` (token ids).

    Returns:
        `{"sequences": [{"prompt_index", "tokens", "text", "logprobs", "stop_reason"} (and
        "sampling_logprobs", see above)], "tokens"}`,
        prompt-major; `tokens` counts prompt and generated tokens of every row. With
        `request.prompt_logprobs`, also `"prompt_logprobs"`: per prompt, each token's log-prob
        (temperature 1, as `forward` computes it), None for the first.
    """
    rows = [(i, k) for i in range(len(prompts)) for k in range(request.num_samples)]
    seeds = [row_seed(base_seed, i, k) for i, k in rows]
    ends = eos_ids(model, tokenizer) | set(request.stop_tokens)
    params = SamplingParams(max_new_tokens=request.max_tokens, temperature=request.temperature,
                            top_p=request.top_p, top_k=request.top_k or -1, do_sample=request.temperature > 0)
    rollout = HFRollout(model, tokenizer.pad_token_id, sorted(ends), max_batch_size=SAMPLE_BATCH_ROWS)
    with precision.autocast():
        drawn = rollout.generate([prompts[i] for i, _ in rows], seeds, params)
    sequences = []
    for (i, _), tokens in zip(rows, drawn):
        cut = _cut_at_stop(tokens, request.stop_strings, tokenizer)
        stopped = cut is not None or (bool(tokens) and tokens[-1] in ends)
        tokens = tokens[:cut] if cut is not None else tokens
        sequences.append({"prompt_index": i, "tokens": tokens,
                          "text": tokenizer.decode(tokens, skip_special_tokens=True),
                          "stop_reason": "stop" if stopped else "length"})
    prompt_logprobs = _score(model, [prompts[i] for i, _ in rows], sequences, 1.0, device, precision, "logprobs")
    if request.temperature > 0 and request.temperature != 1.0:
        _score(model, [prompts[i] for i, _ in rows], sequences, request.temperature, device, precision,
               "sampling_logprobs")
    total = sum(len(prompts[i]) + len(s["tokens"]) for (i, _), s in zip(rows, sequences))
    out: dict[str, Any] = {"sequences": sequences, "tokens": total}
    if request.prompt_logprobs:  # every row of a prompt scored it the same way: take its first row's
        out["prompt_logprobs"] = [[None, *prompt_logprobs[i * request.num_samples]] for i in range(len(prompts))]
    return out


@torch.no_grad()
def _score(model: nn.Module, prompts: Sequence[list[int]], sequences: list[dict[str, Any]], temperature: float,
           device: torch.device, precision: Precision, field: str) -> list[list[float]]:
    """Fill each sequence's `field` with the log-probs of its tokens at `temperature`: one forward
    over prompt + continuation (minus its last token). Returns each row's prompt tokens' log-probs
    from the same forward (all but the first token's, which nothing predicts)."""
    seqs = [p + s["tokens"][:-1] for p, s in zip(prompts, sequences)]
    targets = [p[1:] + s["tokens"] for p, s in zip(prompts, sequences)]
    prompt_part: list[list[float]] = [[] for _ in seqs]
    was_training = model.training
    model.eval()
    try:
        for index in micro_batches([len(s) for s in seqs], 1, MICRO_BATCH_TOKENS):
            with precision.autocast():
                logp, _ = token_log_probs(model, [seqs[i] for i in index], [targets[i] for i in index], device,
                                          temperature)
            logp = logp.cpu()
            for row, i in enumerate(index):
                n, end = len(sequences[i]["tokens"]), len(seqs[i])
                sequences[i][field] = logp[row, end - n:end].tolist()
                prompt_part[i] = logp[row, :len(prompts[i]) - 1].tolist()
    finally:
        model.train(was_training)
    return prompt_part
