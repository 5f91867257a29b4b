"""The pure-Python text graders: `string_check` operations and `text_similarity` metrics.

Each metric takes texts up to a size (`LIMITS`, per side) that keeps one sample's grading to about a
second and tens of MiB: `rouge_l`'s longest common subsequence and `fuzzy_match`'s edit distance are
quadratic (rouge-score's table for 8,000 words a side took 586 MiB and 18 s). Beyond it the sample is
not scored (`TooLong`), in the API and in training workers alike.
"""

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


LIMITS: dict[str, tuple[int, str]] = {"rouge_l": (2_000, "words"), "fuzzy_match": (100_000, "characters")}
"""The most a metric takes per text (input, and reference, each); the others: `DEFAULT_LIMIT`."""
DEFAULT_LIMIT = (50_000, "words")


class TooLong(ValueError):
    """A text over its metric's limit: `side` is `input` or `reference`."""

    def __init__(self, metric: str, side: str, size: int) -> None:
        limit, unit = LIMITS.get(metric, DEFAULT_LIMIT)
        super().__init__(f"text_similarity {metric}: the {side} has {size} {unit}, more than the {limit} "
                         "it may have")
        self.side = side


def check_size(metric: str, text: str, reference: str) -> None:
    """Raise TooLong when `text` or `reference` is over `metric`'s limit."""
    limit, unit = LIMITS.get(metric, DEFAULT_LIMIT)
    for side, value in (("input", text), ("reference", reference)):
        # A text of at most `limit` characters has at most `limit` words: most never get split here.
        size = len(value) if unit == "characters" or len(value) <= limit else len(value.split())
        if size > limit:
            raise TooLong(metric, side, size)


class _NoWordNet:
    """Stands in for nltk's WordNet in METEOR: no synonym matches (the corpus is not shipped)."""

    @staticmethod
    def synsets(*_: Any, **__: Any) -> list[Any]:
        return []


def similarity(metric: str, text: str, reference: str) -> float:
    """`text` scored against `reference` by `metric` (one of spec.METRICS), in [0, 1]; TooLong when a
    text is over the metric's limit."""
    check_size(metric, text, reference)
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
