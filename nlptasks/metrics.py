"""Classification metrics in NumPy: offline, no ``evaluate.load`` from the hub.

``classification_report`` returns a flat dict: ``accuracy``, ``f1_macro``, ``precision_macro``,
``recall_macro`` and, per class, ``f1/<label>``, ``precision/<label>``, ``recall/<label>`` and
``support/<label>`` (per-class keys contain a ``/``; the CLI shows them as a table).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["classification_report", "correlations"]


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
