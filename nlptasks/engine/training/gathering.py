"""Evaluation outputs of any rank, gathered over batches whose padded lengths differ.

With dynamic padding every batch has its own length.  transformers' evaluation loop concatenates
the batches' outputs as it goes and pads only their second axis, which fits ``(batch, tokens)``
and ``(batch, tokens, classes)`` but stops a model whose later axes follow the length too: a span
head's ``(batch, types, tokens, tokens)`` scores, a candidates axis whose sequences vary.  The
engine asks the loop for the batches as they are (``eval_do_concat_batches = False``) and joins
them here, padding every axis that differs with ``-100`` (transformers' own padding value), before
step 6 sees them and before ``trainer.predict`` returns them.  A recipe that sets
``train.extra.eval_do_concat_batches`` keeps what it asked for.

Under several processes the loop gathers each batch from every process, again padding the second
axis only; :func:`pad_gathers` pads the later axes across processes first.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PAD", "join_batches", "pad_concatenate", "pad_gathers"]

PAD = -100
"""What pads a shorter batch's outputs and labels (transformers' ``padding_index``)."""


def pad_concatenate(parts: list[Any], pad: int = PAD) -> Any:
    """``parts`` (arrays of one rank) joined along their first axis, every later axis padded with
    ``pad`` to the longest part's size."""
    import numpy as np

    arrays = [np.atleast_1d(np.asarray(p)) for p in parts]
    if not arrays:
        return np.asarray([])
    if len({a.shape[1:] for a in arrays}) == 1:
        return np.concatenate(arrays, axis=0)
    ranks = {a.ndim for a in arrays}
    if len(ranks) != 1:
        raise ValueError(f"evaluation batches of different ranks: {sorted(ranks)}")
    later = tuple(max(a.shape[d] for a in arrays) for d in range(1, arrays[0].ndim))
    out = np.full((sum(len(a) for a in arrays), *later), pad, dtype=np.result_type(*arrays))
    row = 0
    for a in arrays:
        out[(slice(row, row + len(a)), *(slice(0, n) for n in a.shape[1:]))] = a
        row += len(a)
    return out


def join_batches(value: Any) -> Any:
    """A list of per-batch outputs (each an array, or a tuple, list or dict of them) joined into one
    output of the same structure; anything else is returned as it is."""
    if not isinstance(value, list) or not value:
        return value
    first = value[0]
    if isinstance(first, (tuple, list)):
        return type(first)(join_batches([batch[i] for batch in value]) for i in range(len(first)))
    if isinstance(first, dict):
        return {key: join_batches([batch[key] for batch in value]) for key in first}
    if first is None:
        return None
    return pad_concatenate(value)


def pad_gathers(trainer: Any) -> None:
    """Under several processes: pad every axis after the second across processes before the
    evaluation loop gathers a batch (the loop pads the second itself)."""
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is None or accelerator.num_processes <= 1:
        return
    gather = accelerator.gather_for_metrics

    def rank_of(value: Any) -> int:
        if isinstance(value, (tuple, list)):
            return max((rank_of(v) for v in value), default=0)
        if isinstance(value, dict):
            return max((rank_of(v) for v in value.values()), default=0)
        return int(getattr(value, "ndim", 0))

    def padded_gather(value: Any, *args: Any, **kwargs: Any) -> Any:
        for dim in range(2, rank_of(value)):
            value = accelerator.pad_across_processes(value, dim=dim, pad_index=PAD)
        return gather(value, *args, **kwargs)

    accelerator.gather_for_metrics = padded_gather  # the loop resets gather_function to this
    trainer.gather_function = padded_gather
