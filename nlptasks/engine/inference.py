"""Step 10, generic part: batched forward passes for inference, and the inference device/dtype.

Inputs are sorted by length so each batch pads little, run under ``torch.inference_mode``, and
the results are put back in the input order.  Models loaded for inference
(:func:`nlptasks.engine.load_trained_model`) go to a CUDA GPU when there is one, in bf16 where
the GPU supports it (``nlptasks infer --precision``); on a CPU they stay fp32 unless bf16 is asked
for and the CPU computes in bf16 natively (AVX-512 BF16 or AMX).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from nlptasks.errors import NlptasksError

__all__ = [
    "PRECISIONS",
    "accepted_inputs",
    "cpu_has_bf16",
    "inference_precision",
    "model_device",
    "precision_for_loading",
    "predict_logits",
    "position_limit",
    "usable_positions",
    "predict_per_token",
    "prepare_for_inference",
    "requested_precision",
    "set_inference_precision",
    "sigmoid",
    "softmax",
]

PRECISIONS = ("auto", "fp32", "bf16")
_precision = "auto"  # what `nlptasks infer --precision` / `nlptasks.load(precision=)` asked for


def set_inference_precision(precision: str) -> None:
    """Choose the dtype of models loaded for inference from now on: ``auto`` (bf16 on a CUDA GPU
    that supports it, else fp32), ``fp32`` or ``bf16`` (a CUDA GPU with bf16, or a CPU with
    native bf16: see :func:`cpu_has_bf16`)."""
    global _precision
    if precision not in PRECISIONS:
        raise NlptasksError(f"precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    _precision = precision


def requested_precision() -> str:
    """What was asked for (``auto``, ``fp32`` or ``bf16``), before :func:`inference_precision`
    resolves it for this machine."""
    return _precision


@contextlib.contextmanager
def precision_for_loading(precision: str) -> Iterator[None]:
    """``with precision_for_loading("fp32"): load_predictor(...)``: the dtype for models loaded
    inside the block, then back to what it was."""
    global _precision
    before = _precision
    set_inference_precision(precision)
    try:
        yield
    finally:
        _precision = before


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (AVX-512 BF16 or AMX, as oneDNN sees it):
    then bf16 inference there is about twice as fast as fp32; emulated, it is slower."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def inference_precision(precision: str | None = None) -> tuple[str, str]:
    """``(device, dtype)`` for inference: ``("cuda", "bf16")`` on a GPU with bf16, ``("cuda",
    "fp32")`` on an older one (or when fp32 is asked for), ``("cpu", "fp32")`` without a GPU, and
    ``("cpu", "bf16")`` when bf16 is asked for on a CPU with native bf16 (never by ``auto``: the
    scores then differ from training's fp32 in the fourth decimal)."""
    import torch

    precision = precision or _precision
    cuda = torch.cuda.is_available()
    bf16 = cuda and torch.cuda.is_bf16_supported()
    if precision == "bf16":
        if not (bf16 or (not cuda and cpu_has_bf16())):
            raise NlptasksError(
                "--precision bf16: needs a CUDA GPU with bf16 support or a CPU with native bf16 (AVX-512 BF16 "
                "or AMX); this machine has " + ("a GPU without it" if cuda else "neither"),
                hint="Leave out --precision (auto: fp32 here) or use --precision fp32.",
            )
    elif precision == "auto":
        precision = "bf16" if bf16 else "fp32"
    return ("cuda" if cuda else "cpu"), precision


def prepare_for_inference(model: Any) -> Any:
    """``model`` in eval mode on the inference device and dtype (see :func:`inference_precision`)."""
    import torch

    device, precision = inference_precision()
    model = model.to(device)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    model.eval()
    return model


def model_device(model: Any) -> Any:
    """Where ``model``'s weights are (inputs must go there)."""
    return next(model.parameters()).device


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
        enc = tokenizer([a for a, _ in texts], [b for _, b in texts], truncation=True, max_length=max_length)
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
                    result[name][i] = np.ascontiguousarray(values[j, -lengths[i]:] if left else values[j, : lengths[i]])
    return result


_OFFSET_POSITIONS = {"roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "data2vec-text", "longformer"}


def position_limit(model: Any) -> int | None:
    """The longest input ``model`` has positions for (``max_position_embeddings``, less the padding
    offset of RoBERTa's family), or ``None`` when its config does not say."""
    config = getattr(model, "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or isinstance(positions, bool):
        return None
    return usable_positions(positions, getattr(config, "model_type", None))


def usable_positions(positions: int, model_type: str | None) -> int:
    """Tokens a model with ``max_position_embeddings == positions`` can read: RoBERTa's family
    spends two positions on its padding offset."""
    return positions - (2 if model_type in _OFFSET_POSITIONS else 0)


def sigmoid(logits: Any) -> Any:
    """Element-wise logistic function of a NumPy array (independent probabilities per label)."""
    import numpy as np

    return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))


def accepted_inputs(model: Any) -> set[str]:
    """The input names ``model.forward`` takes; for a PEFT model (whose forward takes ``**kwargs``),
    those of the base model it passes them to."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return set(inspect.signature(base.forward).parameters)


def softmax(logits: Any) -> Any:
    """Probabilities over the last axis of a NumPy array of logits."""
    import numpy as np

    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


