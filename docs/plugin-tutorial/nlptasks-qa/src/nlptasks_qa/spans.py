"""Windows over long contexts, answer spans in token positions, the best span of an example over
all its windows, and the SQuAD-style scores.  Plain Python and NumPy: no nlptasks, no model.

A question and its context are tokenized as one pair; when they do not fit in ``max_length``
the context is cut into windows that overlap by ``stride`` tokens (the tokenizer's
``return_overflowing_tokens``), each window a model input with the whole question.  Training
teaches each window the answer's start and end token, or the first token (``[CLS]``) when the
answer is not wholly inside it.  At evaluation and inference every window proposes its best span
inside its part of the context, and the example keeps the best proposal of all its windows: no
answer is lost because it fell in a window the model did not see.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

NO_ANSWER = 0  # the position [CLS] stands at: "the answer is not in this window"


@dataclass(frozen=True)
class Windows:
    """The model inputs of a list of (question, context) pairs.

    :param features: the tokenizer's columns (``input_ids``, ``attention_mask``...), one row per window.
    :param example: window → the index of its (question, context) pair.
    :param offsets: window → per token the ``(start, end)`` characters in the context, or ``None``
        for tokens outside the context (the question, special tokens).
    """

    features: dict[str, list[Any]]
    example: list[int]
    offsets: list[list[tuple[int, int] | None]]


def make_windows(
    tokenizer: Any, questions: list[str], contexts: list[str], max_length: int, stride: int, padding: bool | str = False
) -> Windows:
    """Tokenize each (question, context) pair into windows of at most ``max_length`` tokens."""
    enc = tokenizer(
        questions,
        contexts,
        truncation="only_second",
        max_length=max_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=padding,
    )
    example = list(enc.pop("overflow_to_sample_mapping"))
    offsets = []
    for i, pairs in enumerate(enc.pop("offset_mapping")):
        sequence = enc.sequence_ids(i)
        offsets.append([tuple(span) if sequence[k] == 1 else None for k, span in enumerate(pairs)])
    return Windows({k: list(v) for k, v in enc.items()}, example, offsets)


def answer_positions(windows: Windows, starts: list[int], ends: list[int]) -> tuple[list[int], list[int]]:
    """Per window, the answer's first and last token when the characters ``starts[e]:ends[e]`` of
    its example lie wholly inside the window, else ``NO_ANSWER`` twice."""
    first, last = [], []
    for w, e in enumerate(windows.example):
        a, b = starts[e], ends[e]
        inside = [k for k, span in enumerate(windows.offsets[w]) if span is not None]
        if not inside or windows.offsets[w][inside[0]][0] > a or windows.offsets[w][inside[-1]][1] < b:
            first.append(NO_ANSWER)
            last.append(NO_ANSWER)
            continue
        s = next(k for k in inside if windows.offsets[w][k][1] > a)
        t = next(k for k in reversed(inside) if windows.offsets[w][k][0] < b)
        first.append(s)
        last.append(t)
    return first, last


@dataclass(frozen=True)
class Span:
    """An answer: characters ``start:end`` of the context, its score (the start and end logits
    summed) and the window it came from."""

    start: int
    end: int
    score: float
    window: int


def best_spans(
    windows: Windows,
    start_logits: list[Any],
    end_logits: list[Any],
    n_examples: int,
    max_answer_tokens: int,
    top: int = 20,
) -> list[Span | None]:
    """Per example, the best :class:`Span` over all its windows, or ``None`` when no window
    proposes one (a start and an end inside the context, in order, at most
    ``max_answer_tokens`` apart).

    :param start_logits: per window, a logit per token (longer arrays are cut to the window).
    """
    import numpy as np

    best: list[Span | None] = [None] * n_examples
    for w, e in enumerate(windows.example):
        offsets = windows.offsets[w]
        n = len(offsets)
        starts = np.asarray(start_logits[w][:n], dtype=np.float64)
        ends = np.asarray(end_logits[w][:n], dtype=np.float64)
        for s in np.argsort(-starts)[:top]:
            if offsets[s] is None:
                continue
            for t in np.argsort(-ends)[:top]:
                if offsets[t] is None or t < s or t - s + 1 > max_answer_tokens:
                    continue
                score = float(starts[s] + ends[t])
                current = best[e]
                if current is None or score > current.score:
                    best[e] = Span(offsets[s][0], offsets[t][1], score, w)
    return best


_TOKENS = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[0-9A-Za-z\u00c0-\u024f]+")


def _tokens(text: str) -> list[str]:
    """Words of Latin text and single CJK characters, lower case; punctuation dropped."""
    return _TOKENS.findall(text.lower())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the answers are the same after normalisation (case, spaces, punctuation)."""
    return float(_tokens(prediction) == _tokens(gold))


def answer_f1(prediction: str, gold: str) -> float:
    """SQuAD's token F1 of two answers, Chinese counted by character (as CMRC does)."""
    from collections import Counter

    p, g = _tokens(prediction), _tokens(gold)
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if not common:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)
