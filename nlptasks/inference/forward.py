"""Batched forward passes for step 10: inputs sorted by length so each batch pads little, run
under ``torch.inference_mode``, the results put back in input order.  What predictors call
(re-exported by :mod:`nlptasks.plugin`); the model comes from
:func:`nlptasks.plugin.load_run`, already on its device and dtype (:mod:`nlptasks.inference.precision`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nlptasks.engine.model.introspect import accepted_inputs

__all__ = [
    "CUT_TOKENS",
    "EXACT_MULTIPLE",
    "PAD_BUDGET",
    "exact_multiple",
    "length_batches",
    "predict_logits",
    "predict_per_token",
    "sigmoid",
    "softmax",
]

PAD_BUDGET = 0.25
"""On a CPU, a batch of at least :data:`CUT_TOKENS` tokens also ends before an input that would make
its padding more than this share of its real tokens: a CPU computes every padded position (a
batch of mixed lengths, as a server gathers them, cost up to twice its real tokens).  Measured on
SST-2 MiniLM, 2 threads (2026-11-27): groups of 32 random sentences 86 -> 115 texts/s in torch,
100 -> 176 in ONNX int8.  A GPU computes the positions in parallel: there batches are
``batch_size`` long."""
CUT_TOKENS = 256
"""A batch is not cut for padding before it holds this many (padded) tokens: smaller matrix
products cost more per token, so cutting a batch of short texts lost more than its padding saved
(a length-sorted file: torch 170 -> 145 texts/s when every batch could be cut)."""


EXACT_MULTIPLE = 16
"""In a reduced precision (bf16, fp16) every input is padded to a multiple of this many tokens and
batched only with inputs padded to the same length: see :func:`exact_multiple`.  Why 16 (SST-2
MiniLM in bf16, 2 threads, 2026-11-27): 8 random sentences split into 4.3 batches with 8 and 3.0
with 16, and ``nlptasks serve`` did 1.55x the naive server at 8 clients and 2.66x at 32 with 8,
1.80-1.85x and 2.87-3.18x with 16, 1.88x and 2.91x with 32; a sorted file streamed at 413 (8) and
430 (16) texts/s."""


def exact_multiple(model: Any) -> int | None:
    """The multiple an input of ``model`` is padded to so that its answer does not depend on the
    inputs batched with it: :data:`EXACT_MULTIPLE` for a model whose weights are in a reduced
    precision, ``None`` (pad to the batch's longest) in fp32.

    Why: a row's result depends on how long it is padded.  In bf16 the attention's sums over a
    longer padded row round differently (measured on SST-2 MiniLM, CPU: logits moved by up to 4e-3,
    scores by 1e-3, so a near-tie could change label with its batch-mates), while the number of
    rows in a batch changes nothing with oneDNN's AVX-512 BF16 kernels (the same row alone, among 3
    or among 33: identical bits).  So each input is padded to its own length rounded up to a
    multiple of 16 and shares a batch only with inputs of that padded length: its answer is the same
    bits alone or in any batch (tested per task in bf16).  oneDNN's AMX kernels (Xeons since Sapphire
    Rapids) tile a product by its number of rows, so there a row's bits still move with its batch
    (MiniLM: within one bf16 step, enough to flip a near-tie); the end-of-run measurement sees it and ``auto``
    answers in fp32 there.  In fp32 the differences stay below 1e-6 and batches pad to their longest."""
    import torch

    try:
        dtype = next(model.parameters()).dtype
    except (StopIteration, AttributeError, TypeError):
        return None
    return EXACT_MULTIPLE if dtype in (torch.bfloat16, torch.float16) else None


def length_batches(lengths: Sequence[int], batch_size: int, cpu: bool, multiple: int | None = None) -> list[list[int]]:
    """Input indices in batches: sorted by length, at most ``batch_size`` each, and on a ``cpu`` a
    batch of :data:`CUT_TOKENS` or more cut where the next input would push its padding past
    :data:`PAD_BUDGET` of its tokens.  With ``multiple`` (:func:`exact_multiple`) a batch holds only
    inputs whose lengths round up to the same multiple of it."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    batch: list[int] = []
    real = 0
    for i in order:
        longer = max(lengths[i], 1) * (len(batch) + 1)
        padded = (lengths[batch[-1]] if batch else 0) * len(batch)
        wasteful = cpu and padded >= CUT_TOKENS and longer > (1 + PAD_BUDGET) * (real + lengths[i])
        if multiple and batch and -(-lengths[i] // multiple) != -(-lengths[batch[-1]] // multiple):
            wasteful = True  # another padded length: another batch
        if batch and (len(batch) >= batch_size or wasteful):
            batches.append(batch)
            batch, real = [], 0
        batch.append(i)
        real += lengths[i]
    if batch:
        batches.append(batch)
    return batches


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
    close to each of its members': :func:`length_batches`), padded batch by batch, and the logits
    put back in order.
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
    out: list[Any] = [None] * len(texts)
    multiple = exact_multiple(model)
    batches: Any = length_batches(lengths, batch_size, cpu=device.type == "cpu", multiple=multiple)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="predict", unit="batch")
    with torch.inference_mode():
        for idx in batches:
            batch = tokenizer.pad(
                [{k: enc[k][i] for k in keys} for i in idx], return_tensors="pt", pad_to_multiple_of=multiple
            )
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
    left = getattr(tokenizer, "padding_side", "right") == "left"
    multiple = exact_multiple(model)
    batches: Any = length_batches(lengths, batch_size, cpu=device.type == "cpu", multiple=multiple)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="predict", unit="batch")
    with torch.inference_mode():
        for idx in batches:
            batch = tokenizer.pad(
                [{k: features[k][i] for k in keys} for i in idx], return_tensors="pt", pad_to_multiple_of=multiple
            )
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
