"""Step 10 for ``pair``: predictors for cross-encoder and bi-encoder runs.

Inputs follow the rule of every task (``nlptasks.plugin.input_fields``): rows with the run's two
text columns (csv/jsonl files, JSON lines on stdin), ``(a, b)`` tuples, strings holding
``a<TAB>b`` (lines of a txt file or stdin), or plain strings taken two at a time
(``nlptasks infer --task pair "句子一" "句子二"``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nlptasks.plugin import (
    DataError,
    LoadOptions,
    exact_multiple,
    input_fields,
    input_texts,
    length_batches,
    load_run,
    predict_logits,
    softmax,
)


def as_pairs(inputs: list[Any], col_a: str, col_b: str) -> list[tuple[str, str]]:
    """The accepted input shapes as ``(a, b)`` pairs (:func:`nlptasks.plugin.input_fields`)."""
    return [(row[col_a], row[col_b]) for row in input_fields(inputs, (col_a, col_b))]


class CrossEncoderPredictor:
    """Pairs → ``{"text_a", "text_b", "label", "score", "scores"}`` (classes: the best label, its
    probability and every label's) or ``{"text_a", "text_b", "score"}`` (scores)."""

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModelForSequenceClassification", options)
        self.columns = (manifest.get("text_a_column", "text_a"), manifest.get("text_b_column", "text_b"))
        self.scores = manifest.get("label_type") == "score"
        self.max_length = options.max_length or manifest.get("max_length")
        self.batch_size = options.batch_size or 32
        self.id2label = {int(k): v for k, v in self.model.config.id2label.items()}

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        pairs = as_pairs(inputs, *self.columns)
        logits = predict_logits(self.model, self.tokenizer, pairs, self.batch_size, self.max_length)
        results = []
        if self.scores:
            for (a, b), row in zip(pairs, logits, strict=True):
                results.append({"text_a": a, "text_b": b, "score": round(float(row[0]), 6)})
            return results
        for (a, b), p in zip(pairs, softmax(logits), strict=True):
            best = int(p.argmax())
            scores = {self.id2label[i]: round(float(v), 6) for i, v in enumerate(p)}
            label = self.id2label[best]
            results.append({"text_a": a, "text_b": b, "label": label, "score": scores[label], "scores": scores})
        return results


class BiEncoderPredictor:
    """Pairs → ``{"text_a", "text_b", "similarity"[, "label"]}``; :meth:`rank` ranks candidates.

    ``label`` is given when the run stored a threshold (binary classes): the second class when the
    cosine similarity reaches it, else the first.
    """

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModel", options)
        self.columns = (manifest.get("text_a_column", "text_a"), manifest.get("text_b_column", "text_b"))
        self.pooling = manifest.get("pooling", "mean")
        self.threshold = manifest.get("threshold")
        self.labels = manifest.get("labels")
        self.max_length = options.max_length or manifest.get("max_length")
        self.batch_size = options.batch_size or 32

    def embed(self, texts: list[str], progress: bool = False) -> Any:
        """L2-normalised embeddings (NumPy, one row per text, input order); the texts are tokenized
        once and batched in order of token count."""
        import numpy as np
        import torch

        from .biencoder import pool

        if not texts:
            return np.zeros((0, self.model.config.hidden_size), dtype=np.float32)
        enc = self.tokenizer(list(texts), truncation=True, max_length=self.max_length)
        device = next(self.model.parameters()).device
        multiple = exact_multiple(self.model)  # in bf16: an answer independent of its batch-mates
        lengths = [len(ids) for ids in enc["input_ids"]]
        out: list[Any] = [None] * len(texts)
        batches: Any = length_batches(lengths, self.batch_size, cpu=device.type == "cpu", multiple=multiple)
        if progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc="embed", unit="batch")
        with torch.inference_mode():
            for idx in batches:
                batch = self.tokenizer.pad(
                    [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i]} for i in idx],
                    return_tensors="pt",
                    pad_to_multiple_of=multiple,
                )
                ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
                hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
                vectors = torch.nn.functional.normalize(pool(hidden, mask, self.pooling).float(), dim=-1).cpu().numpy()
                for j, i in enumerate(idx):
                    out[i] = vectors[j]
        return np.stack(out)

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        pairs = as_pairs(inputs, *self.columns)
        texts = [a for a, _ in pairs] + [b for _, b in pairs]
        vectors = self.embed(texts)
        a_vec, b_vec = vectors[: len(pairs)], vectors[len(pairs) :]
        results = []
        for (a, b), u, v in zip(pairs, a_vec, b_vec, strict=True):
            similarity = float((u * v).sum())
            result: dict[str, Any] = {"text_a": a, "text_b": b, "similarity": round(similarity, 6)}
            if self.threshold is not None and self.labels:
                result["label"] = self.labels[1] if similarity >= self.threshold else self.labels[0]
            results.append(result)
        return results

    def _text(self, item: Any, index: int, what: str) -> str:
        """A query or candidate: a text, or a row with ``text`` (or one of the run's text columns)."""
        key = "text"
        if isinstance(item, dict):
            key = next((k for k in ("text", *self.columns) if k in item), "")
            if not key:
                raise DataError(f"{what}: no 'text' field; fields: {', '.join(map(str, item))}", row=index + 1)
        return input_texts([item], key, offset=index)[0]

    def rank(self, queries: list[Any], candidates: list[Any], top_k: int = 5) -> list[dict[str, Any]]:
        """For each query, the ``top_k`` most similar candidates (embeddings computed once each)."""
        import numpy as np

        query_texts = [self._text(q, i, "query") for i, q in enumerate(queries)]
        candidate_texts = [self._text(c, i, "candidate") for i, c in enumerate(candidates)]
        if not candidate_texts:
            raise DataError("the candidate list is empty")
        q = self.embed(query_texts)
        c = self.embed(candidate_texts, progress=len(candidate_texts) > 10 * self.batch_size)
        scores = q @ c.T
        k = min(top_k, len(candidate_texts))
        results = []
        for text, row in zip(query_texts, scores, strict=True):
            best = np.argsort(-row, kind="stable")[:k]
            results.append(
                {
                    "query": text,
                    "results": [
                        {"rank": r + 1, "candidate": candidate_texts[i], "similarity": round(float(row[i]), 6)}
                        for r, i in enumerate(best)
                    ],
                }
            )
        return results
