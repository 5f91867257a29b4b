"""The pure-Python text graders: `string_check` operations and `text_similarity` metrics."""

from __future__ import annotations

from functools import lru_cache
from typing import Any


def string_check(operation: str, text: str, reference: str) -> float:
    """1.0 or 0.0: `eq`, `ne`, `like` (reference contained), `ilike` (the same, ignoring case)."""
    if operation == "eq":
        return float(text == reference)
    if operation == "ne":
        return float(text != reference)
    if operation == "like":
        return float(reference in text)
    return float(reference.lower() in text.lower())


class _NoWordNet:
    """Stands in for nltk's WordNet in METEOR: no synonym matches (the corpus is not shipped)."""

    @staticmethod
    def synsets(*_: Any, **__: Any) -> list[Any]:
        return []


def similarity(metric: str, text: str, reference: str) -> float:
    """`text` scored against `reference` by `metric` (one of spec.METRICS), in [0, 1]."""
    if metric == "fuzzy_match":
        from rapidfuzz import fuzz

        return fuzz.ratio(text, reference) / 100.0
    hyp, ref = text.split(), reference.split()
    if metric == "bleu":
        from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

        return float(sentence_bleu([ref], hyp, smoothing_function=SmoothingFunction().method1)) if hyp else 0.0
    if metric == "gleu":
        from nltk.translate.gleu_score import sentence_gleu

        return float(sentence_gleu([ref], hyp)) if hyp else 0.0
    if metric == "meteor":
        from nltk.translate.meteor_score import meteor_score

        return float(meteor_score([ref], hyp, wordnet=_NoWordNet())) if hyp and ref else 0.0
    kind = "rougeL" if metric == "rouge_l" else "rouge" + metric.removeprefix("rouge_")
    return float(_rouge(kind).score(reference, text)[kind].fmeasure)


@lru_cache(maxsize=8)
def _rouge(kind: str) -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer([kind])
