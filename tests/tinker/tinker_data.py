"""Data the Tinker client tests train on: a few short texts as next-token cross-entropy datums."""

from __future__ import annotations

from tinker import types

TEXTS = ["the cat sat on the mat", "a dog ran in the park", "birds sing at dawn", "rain falls on the roof"]


def supervised(tokenizer) -> list[types.Datum]:
    """One datum per text: every next token a target of weight 1."""
    data = []
    for text in TEXTS:
        ids = tokenizer.encode(text)
        data.append(types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                                loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)}))
    return data
