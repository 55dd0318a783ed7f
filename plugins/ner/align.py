"""Windows over long sentences and sub-word label alignment, shared by training, evaluation and
inference.

A sentence whose sub-tokens do not fit in ``max_length`` (special tokens included) is cut into
windows of whole words that overlap by ``stride`` words.  Every window is a model input; every
word gets its prediction from the window in which it is most central (furthest from a window
edge), so no word is lost and each is predicted with context on both sides where possible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IGNORE = -100


@dataclass(frozen=True)
class Window:
    """Words ``start:end`` of sentence ``sentence``; ``first[j]`` is the token position of the
    first sub-token of word ``start + j`` in the encoded window."""

    sentence: int
    start: int
    end: int
    first: tuple[int, ...]


def plan_windows(counts: list[int], budget: int, stride: int, overflow: str = "window") -> list[tuple[int, int]]:
    """Word ranges ``(start, end)`` covering a sentence whose words have ``counts`` sub-tokens.

    :param budget: sub-tokens a window may hold (``max_length`` minus special tokens).
    :param stride: words shared by consecutive windows.
    :param overflow: ``"window"``: cover every word; ``"truncate"``: only the first window (the
        classic behaviour: words past ``max_length`` are lost).
    """
    n = len(counts)
    windows: list[tuple[int, int]] = []
    start = 0
    while True:
        end, used = start, 0
        while end < n and used + counts[end] <= budget:
            used += counts[end]
            end += 1
        if end == start:  # one word longer than the budget: its extra sub-tokens are cut
            end = start + 1
        windows.append((start, end))
        if end >= n or overflow == "truncate":
            return windows
        start = max(start + 1, end - stride)


def word_counts(tokenizer: Any, sentences: list[list[str]]) -> tuple[list[list[str]], list[list[int]]]:
    """Sub-tokens per word.  Words that give no token at all (a space, a control character) are
    replaced by the unknown token, so every word can be labelled and predicted."""
    enc = tokenizer(sentences, is_split_into_words=True, add_special_tokens=False, verbose=False)
    fixed_sentences, counts = [], []
    for i, words in enumerate(sentences):
        c = [0] * len(words)
        for wid in enc.word_ids(i):
            if wid is not None:
                c[wid] += 1
        if 0 in c:
            words = [w if n else tokenizer.unk_token for w, n in zip(words, c, strict=True)]
            c = [n or 1 for n in c]
        fixed_sentences.append(words)
        counts.append(c)
    return fixed_sentences, counts


def encode(
    tokenizer: Any,
    sentences: list[list[str]],
    max_length: int,
    stride: int,
    overflow: str = "window",
    tags: list[list[int]] | None = None,
    subword_labels: str = "first",
    b_to_i: dict[int, int] | None = None,
    padding: bool | str = False,
) -> tuple[dict[str, list[Any]], list[Window]]:
    """Tokenize sentences (lists of words) into windows, with token labels when ``tags`` (label
    ids per word) are given.

    Label policy: the first sub-token of each word carries the word's tag; with
    ``subword_labels="all"`` the other sub-tokens carry it too (a ``B-X`` becomes ``I-X`` there,
    through ``b_to_i``), otherwise they get -100.  Special tokens always get -100.
    """
    sentences, counts = word_counts(tokenizer, sentences)
    budget = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    if budget < 1:
        raise ValueError(f"max_length {max_length} leaves no room for words")
    plan: list[tuple[int, int, int]] = []
    for s, c in enumerate(counts):
        plan += [(s, a, b) for a, b in plan_windows(c, budget, stride, overflow)]
    enc = tokenizer(
        [sentences[s][a:b] for s, a, b in plan],
        is_split_into_words=True,
        truncation=True,
        max_length=max_length,
        padding=padding,
    )
    features: dict[str, list[Any]] = {k: list(v) for k, v in enc.items()}
    windows: list[Window] = []
    labels: list[list[int]] = []
    b_to_i = b_to_i or {}
    for w, (s, a, b) in enumerate(plan):
        word_ids = enc.word_ids(w)
        first = [-1] * (b - a)
        row = []
        prev = None
        for pos, wid in enumerate(word_ids):
            if wid is None:
                row.append(IGNORE)
            elif wid != prev:
                first[wid] = pos
                row.append(tags[s][a + wid] if tags is not None else IGNORE)
            elif subword_labels == "all" and tags is not None:
                tag = tags[s][a + wid]
                row.append(b_to_i.get(tag, tag))
            else:
                row.append(IGNORE)
            prev = wid
        windows.append(Window(s, a, b, tuple(first)))
        labels.append(row)
    if tags is not None:
        features["labels"] = labels
    return features, windows


def merge(windows: list[Window], window_preds: list[list[Any]], lengths: list[int], default: Any) -> list[list[Any]]:
    """Per-word predictions of whole sentences from per-window ones.

    :param window_preds: for each window, the prediction of each of its words (``None`` where a
        word got no token).
    :param lengths: words per sentence.
    :param default: the prediction of a word that no window predicts (e.g. the ``O`` tag).
    """
    out = [[default] * n for n in lengths]
    best = [[-1] * n for n in lengths]
    for win, preds in zip(windows, window_preds, strict=True):
        for j, pred in enumerate(preds):
            if pred is None:
                continue
            i = win.start + j
            centrality = min(j, win.end - 1 - i)
            if centrality > best[win.sentence][i]:
                best[win.sentence][i] = centrality
                out[win.sentence][i] = pred
    return out


def scored_words(windows: list[Window], lengths: list[int]) -> int:
    """How many words of the sentences at least one window predicts."""
    seen = [[False] * n for n in lengths]
    for win in windows:
        for j, pos in enumerate(win.first):
            if pos >= 0:
                seen[win.sentence][win.start + j] = True
    return sum(sum(s) for s in seen)
