"""Classification metrics in NumPy: offline, no ``evaluate.load`` from the hub.

``classification_report`` returns a flat dict: ``accuracy``, ``f1_macro``, ``precision_macro``,
``recall_macro`` and, per class, ``f1/<label>``, ``precision/<label>``, ``recall/<label>`` and
``support/<label>`` (per-class keys contain a ``/``; the CLI shows them as a table).

For multi-label classification (any number of labels per example, one sigmoid probability per
label), ``multilabel_report`` scores decisions at given thresholds and ``choose_thresholds`` picks
them on a split (the way spaCy's ``find-threshold`` and SetFit's threshold search do): one global
threshold and one per label.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["THRESHOLD_GRID", "choose_thresholds", "classification_report", "correlations", "multilabel_report"]


def classification_report(predictions: Any, references: Any, labels: Sequence[str]) -> dict[str, float]:
    """Accuracy, macro precision/recall/F1 and per-class figures of predicted class ids against
    reference class ids (``labels[i]`` names class ``i``): the keys of the module docstring."""
    import numpy as np

    pred = np.asarray(predictions).reshape(-1)
    ref = np.asarray(references).reshape(-1)
    out: dict[str, float] = {"accuracy": float((pred == ref).mean()) if len(ref) else 0.0}
    f1s, precisions, recalls = [], [], []
    for i, name in enumerate(labels):
        tp = float(((pred == i) & (ref == i)).sum())
        fp = float(((pred == i) & (ref != i)).sum())
        fn = float(((pred != i) & (ref == i)).sum())
        p = tp / (tp + fp) if tp + fp else 0.0
        r = tp / (tp + fn) if tp + fn else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
        out[f"precision/{name}"] = p
        out[f"recall/{name}"] = r
        out[f"f1/{name}"] = f
        out[f"support/{name}"] = float((ref == i).sum())
        precisions.append(p)
        recalls.append(r)
        f1s.append(f)
    n = max(len(labels), 1)
    out["f1_macro"] = sum(f1s) / n
    out["precision_macro"] = sum(precisions) / n
    out["recall_macro"] = sum(recalls) / n
    return out


def _ranks(values: Any) -> Any:
    """Ranks from 1, ties sharing their average rank (as Spearman's coefficient needs)."""
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=np.float64)
    sorted_values = values[order]
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def correlations(predictions: Any, references: Any) -> dict[str, float]:
    """``pearson`` and ``spearman`` correlation of predicted and gold scores (0.0 when undefined)."""
    import numpy as np

    pred = np.asarray(predictions, dtype=np.float64).reshape(-1)
    ref = np.asarray(references, dtype=np.float64).reshape(-1)

    def pearson(x: Any, y: Any) -> float:
        if len(x) < 2 or x.std() == 0 or y.std() == 0:
            return 0.0
        return float(np.corrcoef(x, y)[0, 1])

    return {"pearson": pearson(pred, ref), "spearman": pearson(_ranks(pred), _ranks(ref))}


THRESHOLD_GRID = tuple(round(0.05 * i, 2) for i in range(1, 20))
"""The thresholds :func:`choose_thresholds` tries: 0.05, 0.10, ... 0.95 (a finer grid fits the
validation rows' noise rather than the labels)."""


def _f1(tp: Any, fp: Any, fn: Any) -> Any:
    import numpy as np

    tp, fp, fn = (np.asarray(x, dtype=np.float64) for x in (tp, fp, fn))
    denominator = 2 * tp + fp + fn
    return np.divide(2 * tp, denominator, out=np.zeros_like(denominator), where=denominator > 0)


def multilabel_report(
    probabilities: Any, targets: Any, labels: Sequence[str], thresholds: float | Sequence[float] = 0.5
) -> dict[str, float]:
    """Figures of multi-label decisions: label ``j`` is predicted for example ``i`` when
    ``probabilities[i, j] >= thresholds[j]`` (one float: the same threshold for every label).

    ``targets`` is the multi-hot matrix of the gold labels (``labels[j]`` names column ``j``).
    Returns ``f1_micro``, ``precision_micro``, ``recall_micro`` (counts pooled over labels),
    ``f1_macro``, ``precision_macro``, ``recall_macro`` (the mean over labels: every label counts
    alike), ``exact_match`` (examples whose whole label set is right, what scikit-learn's
    ``accuracy_score`` gives for multi-label data), ``jaccard`` (per example |predicted ∩ gold| /
    |predicted ∪ gold|, 1.0 when both are empty, averaged: SemEval-2018 E-c's main figure) and per
    label ``precision/<label>``, ``recall/<label>``, ``f1/<label>``, ``support/<label>`` (gold
    examples) and ``threshold/<label>``."""
    import numpy as np

    probs = np.asarray(probabilities, dtype=np.float64)
    gold = np.asarray(targets) >= 0.5
    probs = probs.reshape(len(probs), -1)
    gold = gold.reshape(len(gold), -1)
    cuts = np.broadcast_to(np.asarray(thresholds, dtype=np.float64), (probs.shape[1],))
    pred = probs >= cuts
    tp = (pred & gold).sum(0)
    fp = (pred & ~gold).sum(0)
    fn = (~pred & gold).sum(0)
    precision = np.divide(tp, tp + fp, out=np.zeros(len(tp)), where=(tp + fp) > 0)
    recall = np.divide(tp, tp + fn, out=np.zeros(len(tp)), where=(tp + fn) > 0)
    f1 = _f1(tp, fp, fn)
    ttp, tfp, tfn = tp.sum(), fp.sum(), fn.sum()
    union = (pred | gold).sum(1)
    inter = (pred & gold).sum(1)
    out: dict[str, float] = {
        "f1_micro": float(_f1(ttp, tfp, tfn)),
        "precision_micro": float(ttp / (ttp + tfp)) if ttp + tfp else 0.0,
        "recall_micro": float(ttp / (ttp + tfn)) if ttp + tfn else 0.0,
        "f1_macro": float(f1.mean()) if len(f1) else 0.0,
        "precision_macro": float(precision.mean()) if len(f1) else 0.0,
        "recall_macro": float(recall.mean()) if len(f1) else 0.0,
        "exact_match": float((pred == gold).all(1).mean()) if len(pred) else 0.0,
        "jaccard": float(np.where(union > 0, inter / np.maximum(union, 1), 1.0).mean()) if len(pred) else 0.0,
    }
    for j, name in enumerate(labels):
        out[f"precision/{name}"] = float(precision[j])
        out[f"recall/{name}"] = float(recall[j])
        out[f"f1/{name}"] = float(f1[j])
        out[f"support/{name}"] = float(gold[:, j].sum())
        out[f"threshold/{name}"] = float(cuts[j])
    return out


def choose_thresholds(
    probabilities: Any, targets: Any, grid: Sequence[float] = THRESHOLD_GRID, min_support: int = 5
) -> dict[str, Any]:
    """The decision thresholds of a multi-label model, chosen on one split's probabilities and
    multi-hot ``targets``:

    - ``global``: the threshold of ``grid`` with the best micro F1 over all labels;
    - ``per_label``: for each label, the threshold with its best F1, where the split has at least
      ``min_support`` examples of it; for a rarer label, ``global`` (its own F1 on a handful of
      examples is noise).  ``fallback`` lists the indices of those labels.

    Ties go to the threshold nearest the global one (for ``global``: nearest 0.5)."""
    import numpy as np

    probs = np.asarray(probabilities, dtype=np.float64)
    probs = probs.reshape(len(probs), -1)
    gold = (np.asarray(targets) >= 0.5).reshape(len(probs), -1)
    cuts = np.asarray(sorted(grid), dtype=np.float64)
    pred = probs[:, :, None] >= cuts[None, None, :]  # examples x labels x grid
    tp = (pred & gold[:, :, None]).sum(0)
    fp = (pred & ~gold[:, :, None]).sum(0)
    fn = (~pred & gold[:, :, None]).sum(0)

    def best(scores: Any, near: float) -> float:
        top = np.flatnonzero(np.isclose(scores, scores.max()))
        return float(cuts[top[np.argmin(np.abs(cuts[top] - near))]])

    overall = best(_f1(tp.sum(0), fp.sum(0), fn.sum(0)), 0.5)
    per_label, fallback = [], []
    support = gold.sum(0)
    for j in range(probs.shape[1]):
        if support[j] < min_support:
            per_label.append(overall)
            fallback.append(j)
        else:
            per_label.append(best(_f1(tp[j], fp[j], fn[j]), overall))
    return {"global": overall, "per_label": per_label, "fallback": fallback}
