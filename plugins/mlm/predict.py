"""Step 10 of the ``mlm`` task: fill in the masked tokens of a text.

``nlptasks infer --model RUN "今天天气很[MASK]。"`` answers, for each input, the text with every
mask token replaced by its most likely token (``filled``) and, per mask, the ``candidates``
(``options.top_k`` tokens with their probabilities, best first), as
``transformers.pipeline("fill-mask", model=RUN)`` gives them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nlptasks.plugin import DataError, LoadOptions, input_texts, load_run, predict_per_token, softmax


class MlmPredictor:
    """Texts with mask tokens → ``{"text", "filled", "masks": [[{"token", "score"}, ...], ...]}``."""

    def __init__(self, run_dir: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModelForMaskedLM", options)
        self.text_column = manifest.get("text_column", "text")
        self.max_length = options.max_length or manifest.get("max_length") or self.tokenizer.model_max_length
        self.batch_size = options.batch_size or 32
        self.top_k = int(manifest.get("options", {}).get("top_k", 5))

    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        texts = input_texts(inputs, self.text_column)
        tok = self.tokenizer
        enc = tok(texts, truncation=True, max_length=self.max_length)
        mask_id = tok.mask_token_id
        for number, ids in enumerate(enc["input_ids"], start=1):
            if mask_id not in ids:
                raise DataError(
                    f"input {number} has no {tok.mask_token} to fill in"
                    + (" within model.max_length tokens" if tok.mask_token in texts[number - 1] else ""),
                    hint=f"Write {tok.mask_token} where a token is to be predicted, e.g. "
                    f"nlptasks infer --model RUN '今天天气很{tok.mask_token}。'",
                )
        logits = predict_per_token(self.model, tok, dict(enc), self.batch_size)["logits"]
        results = []
        for text, ids, scores in zip(texts, enc["input_ids"], logits, strict=True):
            filled, masks = list(ids), []
            for position in [i for i, t in enumerate(ids) if t == mask_id]:
                probs = softmax(scores[position])
                best = probs.argsort()[::-1][: self.top_k]
                masks.append([{"token": tok.decode([int(i)]), "score": round(float(probs[i]), 6)} for i in best])
                filled[position] = int(best[0])
            results.append({"text": text, "filled": tok.decode(filled, skip_special_tokens=True), "masks": masks})
        return results
