"""Step 10 for ``ner``: texts or token lists in, entities with character offsets out.

Input words: a text is split into characters (models trained on character tokens, e.g. Chinese)
or at whitespace (models trained on words, e.g. English), as recorded in the run manifest
(``ner.word_split``).  Long inputs are windowed exactly as in training, so nothing is cut off.
The sub-word policy of the run decides which sub-token speaks for a word: the first one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from nlptasks.plugin import (
    DataError,
    LoadOptions,
    NlptasksError,
    input_texts,
    input_words,
    load_run,
    predict_per_token,
)

from .align import encode, merge
from .data import iter_conll, iter_conll_lines, write_conll


def entity_spans(tags: list[str]) -> list[tuple[str, int, int]]:
    """``(type, first word, last word)`` of each entity, read leniently like conlleval/seqeval's
    default mode (an ``I-X`` after ``O`` starts an entity)."""
    from seqeval.metrics.sequence_labeling import get_entities

    return [(t, a, b) for t, a, b in get_entities(list(tags))]


class NerPredictor:
    """Callable predictor: ``predictor(["小明在北京大学读书"])`` →
    ``[{"text", "entities": [{"type", "text", "start", "end", "score"}]}]``.

    Inputs are strings, or dicts with ``text`` (a string) or ``tokens`` (a list of words; the
    result then also has ``tokens`` and ``tags``).  ``formats``/``read_inputs``/``write_outputs``
    implement ``nlptasks infer --format conll``.
    """

    formats = {
        "conll": "CoNLL: token (first column) per line, blank line between sentences; "
        "writes token and predicted tag per line"
    }

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModelForTokenClassification", options)
        settings = manifest.get("ner", {})
        self.max_length = options.max_length or int(manifest.get("max_length") or 128)
        self.stride = int(settings.get("stride", 16))
        self.word_split = settings.get("word_split", "whitespace")
        self.batch_size = options.batch_size or 32
        self.id2label = {int(k): v for k, v in self.model.config.id2label.items()}

    # -- inputs ---------------------------------------------------------------------------------

    def _words(self, item: Any, index: int) -> tuple[str, list[str], list[tuple[int, int]], bool]:
        """``(text, words, character spans of the words, given as tokens?)``."""
        if isinstance(item, dict):
            if "tokens" in item:
                words = input_words(item["tokens"], "tokens", index)
                sep = "" if self.word_split == "char" else " "
                spans, pos = [], 0
                for w in words:
                    spans.append((pos, pos + len(w)))
                    pos += len(w) + len(sep)
                return sep.join(words), words, spans, True
            if "text" not in item:
                raise DataError(f"expected a 'text' or 'tokens' field; fields: {', '.join(item)}", row=index + 1)
        text = input_texts([item], "text", offset=index)[0]
        pattern = r"\S" if self.word_split == "char" else r"\S+"
        matches = list(re.finditer(pattern, text))
        return text, [m.group() for m in matches], [m.span() for m in matches], False

    def read_inputs(self, path: Path | None, fmt: str, stream: TextIO | None = None) -> Iterator[Any]:
        """Read a file (or ``stream``) in one of :attr:`formats`, lazily (``nlptasks infer`` streams it)."""
        if fmt != "conll":
            raise NlptasksError(f"the ner task cannot read format {fmt!r}")
        if path is None:
            import sys

            sentences = iter_conll_lines((stream or sys.stdin), "<stdin>", tags_required=False)
        else:
            sentences = iter_conll(path, tags_required=False)
        return ({"tokens": tokens} for _, tokens, _ in sentences)

    def write_outputs(self, results: list[dict[str, Any]], fmt: str, stream: TextIO) -> None:
        """Write results in one of :attr:`formats` (CoNLL: the input tokens and predicted tags)."""
        if fmt != "conll":
            raise NlptasksError(f"the ner task cannot write format {fmt!r}")
        write_conll([(r["tokens"], r["tags"]) for r in results], stream)

    # -- prediction -----------------------------------------------------------------------------

    def predict_tags(self, sentences: list[list[str]]) -> list[list[tuple[str, float]]]:
        """``(tag, probability)`` per word of each sentence (lists of words)."""
        import numpy as np

        out: list[list[tuple[str, float]]] = [[] for _ in sentences]
        todo = [i for i, s in enumerate(sentences) if s]
        if not todo:
            return out
        features, windows = encode(self.tokenizer, [sentences[i] for i in todo], self.max_length, self.stride)
        logits = predict_per_token(self.model, self.tokenizer, features, self.batch_size)["logits"]
        window_preds: list[list[Any]] = []
        for window, values in zip(windows, logits, strict=True):
            probs = np.exp(values - values.max(axis=-1, keepdims=True))
            probs /= probs.sum(axis=-1, keepdims=True)
            best = probs.argmax(axis=-1)
            window_preds.append(
                [None if pos < 0 else (int(best[pos]), float(probs[pos, best[pos]])) for pos in window.first]
            )
        merged = merge(windows, window_preds, [len(sentences[i]) for i in todo], default=None)
        o_id = next((i for i, name in self.id2label.items() if name == "O"), 0)
        for i, words in zip(todo, merged, strict=True):
            out[i] = [(self.id2label[p[0]], p[1]) if p is not None else (self.id2label[o_id], 0.0) for p in words]
        return out

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        parsed = [self._words(item, i) for i, item in enumerate(inputs)]
        predicted = self.predict_tags([words for _, words, _, _ in parsed])
        results = []
        for (text, words, spans, as_tokens), tagged in zip(parsed, predicted, strict=True):
            tags = [t for t, _ in tagged]
            entities = []
            for kind, a, b in entity_spans(tags):
                start, end = spans[a][0], spans[b][1]
                score = sum(p for _, p in tagged[a : b + 1]) / (b - a + 1)
                entities.append(
                    {"type": kind, "text": text[start:end], "start": start, "end": end, "score": round(score, 6)}
                )
            result: dict[str, Any] = {"text": text, "entities": entities}
            if as_tokens:
                result["tokens"] = words
                result["tags"] = tags
            results.append(result)
        return results
