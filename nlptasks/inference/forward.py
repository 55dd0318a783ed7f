"""Batched forward passes for step 10: inputs sorted by length so each batch pads little, run
under ``torch.inference_mode``, the results put back in input order.  What predictors call
(re-exported by :mod:`nlptasks.plugin`); the model comes from
:func:`nlptasks.plugin.load_run`, already on its device and dtype (:mod:`nlptasks.inference.precision`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nlptasks.engine.model.introspect import accepted_inputs

__all__ = ["predict_logits", "predict_per_token", "sigmoid", "softmax"]


def predict_logits(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str] | Sequence[tuple[str, str]],
    batch_size: int = 32,
    max_length: int | None = None,
    progress: bool = False,
) -> Any:
    """Logits for ``texts`` (strings, or ``(a, b)`` pairs) as a NumPy array, in input order.

    The inputs are tokenized once, sorted by their number of tokens (so a batch pads to a length
    close to each of its members'), padded batch by batch, and the logits put back in order.
    """
    import numpy as np
    import torch

    if not texts:
        return np.zeros((0, getattr(model.config, "num_labels", 1)), dtype=np.float32)
    model.eval()
    device = next(model.parameters()).device
    if isinstance(texts[0], str):
        enc = tokenizer(list(texts), truncation=True, max_length=max_length)
    else:
        pairs: list[tuple[str, str]] = list(texts)  # type: ignore[arg-type]
        enc = tokenizer([a for a, _ in pairs], [b for _, b in pairs], truncation=True, max_length=max_length)
    keys = [k for k in enc.keys() if k in accepted_inputs(model)]
    lengths = [len(ids) for ids in enc["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    out: list[Any] = [None] * len(texts)
    batches: Any = range(0, len(order), batch_size)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="predict", unit="batch")
    with torch.inference_mode():
        for start in batches:
            idx = order[start : start + batch_size]
            batch = tokenizer.pad([{k: enc[k][i] for k in keys} for i in idx], return_tensors="pt")
            logits = model(**{k: v.to(device) for k, v in batch.items()}).logits.float().cpu().numpy()
            for j, i in enumerate(idx):
                out[i] = logits[j]
    return np.stack(out)


def predict_per_token(
    model: Any,
    tokenizer: Any,
    features: dict[str, list[Any]],
    batch_size: int = 32,
    outputs: Sequence[str] = ("logits",),
    progress: bool = False,
) -> dict[str, list[Any]]:
    """Per-token outputs of ``model`` for already tokenized ``features`` (windows, pairs, texts with
    offsets), one array per feature, in input order, cut to the feature's own tokens.

    :param features: column → one list per feature, as a tokenizer returns them (``input_ids``,
        ``attention_mask`` ...; other columns such as ``offset_mapping`` are ignored).
    :param outputs: the model output fields to return (``logits``; ``start_logits`` and
        ``end_logits`` for question answering).
    :returns: output name → a float32 NumPy array per feature, of shape ``(tokens, ...)``.

    Features are batched by length (little padding) under ``torch.inference_mode``.
    """
    import numpy as np
    import torch

    n = len(features["input_ids"])
    result: dict[str, list[Any]] = {name: [None] * n for name in outputs}
    if not n:
        return result
    model.eval()
    device = next(model.parameters()).device
    keys = [k for k in features if k in accepted_inputs(model)]
    lengths = [len(ids) for ids in features["input_ids"]]
    order = sorted(range(n), key=lambda i: lengths[i])
    left = getattr(tokenizer, "padding_side", "right") == "left"
    batches: Any = range(0, n, batch_size)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="predict", unit="batch")
    with torch.inference_mode():
        for start in batches:
            idx = order[start : start + batch_size]
            batch = tokenizer.pad([{k: features[k][i] for k in keys} for i in idx], return_tensors="pt")
            out = model(**{k: v.to(device) for k, v in batch.items()})
            for name in outputs:
                values = out[name].float().cpu().numpy()
                for j, i in enumerate(idx):
                    result[name][i] = np.ascontiguousarray(
                        values[j, -lengths[i] :] if left else values[j, : lengths[i]]
                    )
    return result


def sigmoid(logits: Any) -> Any:
    """Element-wise logistic function of a NumPy array (independent probabilities per label)."""
    import numpy as np

    return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))


def softmax(logits: Any) -> Any:
    """Probabilities over the last axis of a NumPy array of logits."""
    import numpy as np

    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)
