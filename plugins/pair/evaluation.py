"""Scoring a pair run beyond ``compute_metrics``: the bi-encoder's cosine threshold (fit after
training, used on test and by ``nlptasks eval``), and what ``nlptasks eval`` lists as errors."""

from __future__ import annotations

from typing import Any

from nlptasks.plugin import RunContext, classification_errors, evaluate_split, train_and_evaluate

__all__ = ["evaluate_at_threshold", "pair_errors", "train_with_threshold"]


def pair_errors(ctx: RunContext, evaluation: Any) -> list[dict[str, Any]]:
    """Classes: every pair whose predicted label is wrong (a bi-encoder's at its cosine
    threshold).  Scores: every pair with its predicted and gold score and the absolute
    difference, largest first."""
    opts = ctx.options
    side = evaluation.side
    fields = {"text_a": side["text_a"], "text_b": side["text_b"]}
    if opts.mode == "cross" and opts.label_type == "classes":
        return classification_errors(evaluation, list(ctx.labels or []), fields)
    predictions = evaluation.predictions[0] if isinstance(evaluation.predictions, tuple) else evaluation.predictions
    predicted, gold = predictions.reshape(-1), evaluation.label_ids.reshape(-1)
    rows = [
        {"row": side["rows"][i], "text_a": side["text_a"][i], "text_b": side["text_b"][i]} for i in range(len(gold))
    ]
    threshold = (ctx.trained_manifest or ctx.manifest).get("threshold")
    if opts.label_type == "classes" and threshold is not None:
        labels = list(ctx.labels or [])
        return [
            {**r, "gold": labels[int(g > 0.5)], "predicted": labels[int(p >= threshold)], "score": round(float(p), 6)}
            for r, p, g in zip(rows, predicted, gold, strict=True)
            if (p >= threshold) != (g > 0.5)
        ]
    out = [
        {**r, "gold": float(g), "predicted": round(float(p), 6), "abs_error": round(abs(float(p) - float(g)), 6)}
        for r, p, g in zip(rows, predicted, gold, strict=True)
    ]
    return sorted(out, key=lambda e: -e["abs_error"])


def train_with_threshold(ctx: RunContext, trainer: Any, data: Any) -> dict[str, Any]:
    """Bi-encoder with two classes, step 9: the default training and evaluation, then the cosine
    threshold with the best validation accuracy (stored with the run), and test at it."""
    from .biencoder import best_threshold

    metrics = train_and_evaluate(ctx, trainer, data)
    fit_on = "validation" if "validation" in data and len(data["validation"]) else "train"
    predicted = trainer.predict(data[fit_on])
    threshold, accuracy = best_threshold(predicted.predictions, predicted.label_ids)
    ctx.manifest["threshold"] = threshold
    ctx.log.info("cosine threshold %.4f: accuracy %.4f on %s", threshold, accuracy, fit_on)
    metrics.setdefault(fit_on, {}).update(threshold=threshold, accuracy=accuracy)
    if fit_on == "validation" and "test" in data and len(data["test"]):
        tested = trainer.predict(data["test"])
        sim, gold = tested.predictions.reshape(-1), tested.label_ids.reshape(-1)
        metrics["test"]["accuracy"] = float(((sim >= threshold) == (gold > 0.5)).mean())
        metrics["test"]["threshold"] = threshold
    return metrics


def evaluate_at_threshold(ctx: RunContext, trainer: Any, data: Any, split: str, threshold: float) -> dict[str, Any]:
    """``nlptasks eval`` of a two-class bi-encoder: the split's accuracy at the run's threshold."""
    metrics = evaluate_split(trainer, data, split)
    evaluation = ctx.evaluations[split]
    sim, gold = evaluation.predictions.reshape(-1), evaluation.label_ids.reshape(-1)
    metrics.update(accuracy=float(((sim >= threshold) == (gold > 0.5)).mean()), threshold=threshold)
    return metrics
