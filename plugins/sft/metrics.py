"""Simple generation metrics, offline: exact match, character F1, ROUGE-L.

Texts are split into units that work for Chinese and English alike: each CJK character is a unit,
runs of letters/digits are units, any other non-space character is a unit.  (ROUGE-L over these
units is ROUGE-L over characters for Chinese and over words for English.)
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

_UNIT = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[A-Za-z0-9]+|\S")


def units(text: str) -> list[str]:
    return _UNIT.findall(text.lower())


def exact_match(prediction: str, reference: str) -> float:
    return float(" ".join(prediction.split()) == " ".join(reference.split()))


def char_f1(prediction: str, reference: str) -> float:
    """F1 of the multiset overlap of units (SQuAD-style token F1; characters for Chinese)."""
    pred, ref = Counter(units(prediction)), Counter(units(reference))
    overlap = sum((pred & ref).values())
    if not pred or not ref:
        return float(pred == ref)
    if overlap == 0:
        return 0.0
    precision, recall = overlap / sum(pred.values()), overlap / sum(ref.values())
    return 2 * precision * recall / (precision + recall)


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure: longest common subsequence of units."""
    a, b = units(prediction), units(reference)
    if not a or not b:
        return float(a == b)
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, 1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    lcs = previous[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(a), lcs / len(b)
    return 2 * precision * recall / (precision + recall)


METRICS: dict[str, Callable[[str, str], float]] = {
    "exact_match": exact_match,
    "char_f1": char_f1,
    "rouge_l": rouge_l,
}


def score(metric: str, predictions: list[str], references: list[str]) -> float:
    fn = METRICS[metric]
    if not predictions:
        return 0.0
    return sum(fn(p, r) for p, r in zip(predictions, references, strict=True)) / len(predictions)
