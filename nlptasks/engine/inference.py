"""Step 10, generic part: batched forward passes for inference.

Inputs are sorted by length so each batch pads little, run under ``torch.inference_mode``, and
the results are put back in the input order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def predict_logits(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str] | Sequence[tuple[str, str]],
    batch_size: int = 32,
    max_length: int | None = None,
    progress: bool = False,
) -> Any:
    """Logits for ``texts`` (strings, or ``(a, b)`` pairs) as a NumPy array, in input order."""
    import numpy as np
    import torch

    if not texts:
        return np.zeros((0, getattr(model.config, "num_labels", 1)), dtype=np.float32)
    model.eval()
    device = next(model.parameters()).device
    lengths = [len(t) if isinstance(t, str) else len(t[0]) + len(t[1]) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    out: list[Any] = [None] * len(texts)
    batches = range(0, len(order), batch_size)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="predict", unit="batch")
    with torch.inference_mode():
        for start in batches:
            idx = order[start : start + batch_size]
            chunk = [texts[i] for i in idx]
            if isinstance(chunk[0], str):
                enc = tokenizer(chunk, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
            else:
                enc = tokenizer(
                    [a for a, _ in chunk], [b for _, b in chunk],
                    truncation=True, max_length=max_length, padding=True, return_tensors="pt",
                )
            enc = {k: v.to(device) for k, v in enc.items() if k in accepted_inputs(model)}
            logits = model(**enc).logits.float().cpu().numpy()
            for j, i in enumerate(idx):
                out[i] = logits[j]
    return np.stack(out)


def accepted_inputs(model: Any) -> set[str]:
    """The input names ``model.forward`` takes; for a PEFT model (whose forward takes ``**kwargs``),
    those of the base model it passes them to."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return set(inspect.signature(base.forward).parameters)


def softmax(logits: Any) -> Any:
    import numpy as np

    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


