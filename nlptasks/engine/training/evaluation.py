"""Step 6 knows which split it scores.

The engine sets ``ctx.evaluating`` around every ``trainer.evaluate`` and ``trainer.predict``
(whoever calls them: the engine's step 9, a plugin's own, the Trainer during training) to the name
of the split being scored, found from the dataset passed in (the tokenized splits of step 4, by
identity, then by fingerprint; the Trainer's own ``eval_dataset`` is ``validation``).  Step 6's
``compute_metrics`` is wrapped so that it receives an :class:`~nlptasks.types.Evaluation`: the
predictions in the split's order, the split's name and ``ctx.side[split]``, the side data step 4
kept for it.  A windowed task thus scores per original example without overriding step 9.

Around every evaluation the engine also keeps the random state of training (Python, NumPy,
torch, CUDA): an evaluation draws from it (each DataLoader iterator takes a seed), so without this
a run resumed from a checkpoint written just before an evaluation would train on with other
dropout masks than the run it continues.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from nlptasks.context import RunContext
from nlptasks.errors import PluginError
from nlptasks.types import Evaluation

__all__ = ["classification_errors", "for_splits", "name_splits", "random_state", "set_random_state", "split_of"]

_PREFIX_SPLITS = {"eval": "validation", "test": "test"}


def split_of(dataset: Any, data: Any, prefix: str | None, default: str = "validation") -> str:
    """The name of the split ``dataset`` is: by identity among ``data``'s splits, then by
    fingerprint, then from the metric prefix (``eval`` → validation, ``test`` → test)."""
    if dataset is None:
        return default
    for name, ds in (data or {}).items():
        if ds is dataset:
            return name
    fingerprint = getattr(dataset, "_fingerprint", None)
    if fingerprint is not None:
        for name, ds in (data or {}).items():
            if getattr(ds, "_fingerprint", None) == fingerprint:
                return name
    if prefix in _PREFIX_SPLITS:
        return _PREFIX_SPLITS[prefix]
    return prefix or default


def for_splits(ctx: RunContext, compute_metrics: Callable[[Any], dict[str, float]] | None) -> Any:
    """Step 6's ``compute_metrics`` as the Trainer calls it (with an ``EvalPrediction``), handing
    the plugin an :class:`~nlptasks.types.Evaluation` of the split ``ctx.evaluating`` names, and
    checking that the result holds the task's ``best_metric``."""
    if compute_metrics is None:
        return None
    best = ctx.task.best_metric_for(ctx.options)
    task = ctx.task

    @functools.wraps(compute_metrics)
    def metrics(prediction: Any, *args: Any, **kwargs: Any) -> dict[str, float]:
        split = ctx.evaluating or "validation"
        evaluation = Evaluation(
            predictions=prediction.predictions,
            label_ids=prediction.label_ids,
            split=split,
            side=ctx.side.get(split, {}),
            inputs=getattr(prediction, "inputs", None),
            losses=getattr(prediction, "losses", None),
        )
        ctx.evaluations[split] = evaluation  # what nlptasks_errors reads (nlptasks eval)
        result = compute_metrics(evaluation, *args, **kwargs)
        if not isinstance(result, dict):
            raise PluginError(
                f"plugin {task.plugin!r}: step 6's compute_metrics returned {type(result).__name__}, not a dict "
                "of metric name → number"
            )
        if best != "loss" and best not in result and kwargs.get("compute_result", True):
            raise PluginError(
                f"plugin {task.plugin!r}: task {task.name!r} picks checkpoints by {best!r}, but step 6's "
                f"compute_metrics returned only: {', '.join(result) or 'nothing'} (on {split})",
                hint="The task's best_metric must be among the keys compute_metrics returns (hookspecs: nlptasks_metrics).",
            )
        return result

    return metrics


def random_state() -> tuple[Any, ...]:
    """The random state training draws from: Python's, NumPy's, torch's and CUDA's."""
    import random

    import numpy as np
    import torch

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda


def set_random_state(state: tuple[Any, ...]) -> None:
    """Put back what :func:`random_state` took."""
    import random

    import numpy as np
    import torch

    python, numpy, cpu, cuda = state
    random.setstate(python)
    np.random.set_state(numpy)
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def name_splits(trainer: Any, ctx: RunContext, data: Any) -> None:
    """Set ``ctx.evaluating`` to the split's name around ``trainer.evaluate`` and
    ``trainer.predict``, whatever Trainer class and caller, and leave training's random state as
    it was before them."""
    original_evaluate, original_predict = trainer.evaluate, trainer.predict

    def scoring(split: str, call: Callable[[], Any]) -> Any:
        before, state = ctx.evaluating, random_state()
        ctx.evaluating = split
        try:
            return call()
        finally:
            ctx.evaluating = before
            set_random_state(state)

    def evaluate(
        eval_dataset: Any = None, ignore_keys: Any = None, metric_key_prefix: str = "eval", **kwargs: Any
    ) -> Any:
        split = split_of(eval_dataset, data, metric_key_prefix)
        return scoring(
            split,
            lambda: original_evaluate(
                eval_dataset=eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix, **kwargs
            ),
        )

    def predict(test_dataset: Any, ignore_keys: Any = None, metric_key_prefix: str = "test", **kwargs: Any) -> Any:
        split = split_of(test_dataset, data, metric_key_prefix, default="test")
        return scoring(
            split,
            lambda: original_predict(
                test_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix, **kwargs
            ),
        )

    trainer.evaluate = evaluate
    trainer.predict = predict


def classification_errors(
    evaluation: Evaluation, labels: list[str], fields: dict[str, list[Any]] | None = None
) -> list[dict[str, Any]]:
    """The wrong predictions of a one-class-per-example evaluation (logits over ``labels``), in
    split order: ``{"row", <fields>, "gold", "predicted", "score", "gold_score"}`` each, where
    ``row`` comes from ``evaluation.side["rows"]`` (the file rows step 4 kept), ``fields`` are
    input columns by name (one value per example: the text, or the pair's two texts), and the
    scores are the probabilities of the predicted and of the gold label.  For a task's
    ``nlptasks_errors``."""
    import numpy as np

    logits = evaluation.predictions[0] if isinstance(evaluation.predictions, tuple) else evaluation.predictions
    logits = np.asarray(logits, dtype=np.float64)
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    probs = shifted / shifted.sum(-1, keepdims=True)
    predicted = probs.argmax(-1)
    gold = np.asarray(evaluation.label_ids).reshape(-1)
    rows = evaluation.side.get("rows") or list(range(1, len(gold) + 1))
    out = []
    for i in np.flatnonzero(predicted != gold):
        item: dict[str, Any] = {"row": int(rows[i])}
        item.update({name: values[i] for name, values in (fields or {}).items()})
        item.update(
            gold=labels[int(gold[i])],
            predicted=labels[int(predicted[i])],
            score=round(float(probs[i, predicted[i]]), 6),
            gold_score=round(float(probs[i, gold[i]]), 6),
        )
        out.append(item)
    return out
