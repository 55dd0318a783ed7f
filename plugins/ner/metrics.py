"""Entity-level metrics with seqeval (offline), on whole sentences merged back from windows."""

from __future__ import annotations

from typing import Any

SEQEVAL_SCHEME = {"BIO": "IOB2", "IOB1": "IOB1", "BIOES": "IOBES"}


def entity_report(gold: list[list[str]], pred: list[list[str]], mode: str = "default", scheme: str = "BIO") -> dict[str, float]:
    """``precision``/``recall``/``f1`` (micro over entities), word ``accuracy``, and per entity
    type ``f1/PER``, ``precision/PER``, ``recall/PER``, ``support/PER``.

    :param mode: ``"default"`` (conlleval: an ``I-X`` after ``O`` starts an entity) or
        ``"strict"`` (entities must be well-formed in the scheme).
    """
    import warnings

    from seqeval import scheme as schemes
    from seqeval.metrics import classification_report

    kwargs: dict[str, Any] = {}
    if mode == "strict":
        kwargs = {"mode": "strict", "scheme": getattr(schemes, SEQEVAL_SCHEME[scheme])}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # undefined precision for types never predicted: 0.0
        report = classification_report(gold, pred, output_dict=True, zero_division=0, **kwargs)
    micro = report.get("micro avg", {})
    words = sum(len(s) for s in gold)
    correct = sum(g == p for gs, ps in zip(gold, pred, strict=True) for g, p in zip(gs, ps, strict=True))
    out: dict[str, float] = {
        "f1": float(micro.get("f1-score", 0.0)),
        "precision": float(micro.get("precision", 0.0)),
        "recall": float(micro.get("recall", 0.0)),
        "accuracy": correct / words if words else 0.0,
    }
    for kind, values in sorted(report.items()):
        if kind.endswith(" avg"):
            continue
        out[f"f1/{kind}"] = float(values["f1-score"])
        out[f"precision/{kind}"] = float(values["precision"])
        out[f"recall/{kind}"] = float(values["recall"])
        out[f"support/{kind}"] = float(values["support"])
    return out
