"""Entity-level metrics with seqeval (offline), on whole sentences merged back from windows."""

from __future__ import annotations

from typing import Any

from nlptasks.plugin import NlptasksError

from .align import merge

SEQEVAL_SCHEME = {"BIO": "IOB2", "IOB1": "IOB1", "BIOES": "IOBES"}


def entity_report(
    gold: list[list[str]], pred: list[list[str]], mode: str = "default", scheme: str = "BIO"
) -> dict[str, float]:
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


def sentence_errors(
    info: dict[str, Any], gold: list[list[str]], pred: list[list[str]], separator: str
) -> list[dict[str, Any]]:
    """The sentences whose predicted entities differ from the gold ones (``nlptasks eval``'s
    errors): file row, text, gold and predicted entities (type, word span, text), and which were
    missed and which invented."""
    from seqeval.metrics.sequence_labeling import get_entities

    errors = []
    for k, (g, p) in enumerate(zip(gold, pred, strict=True)):
        if g == p:
            continue
        words = info["tokens"][k]

        def spans(tags: list[str], words: list[str] = words) -> list[dict[str, Any]]:
            return [
                {"type": t, "start": a, "end": b + 1, "text": separator.join(words[a : b + 1])}
                for t, a, b in get_entities(tags)
            ]

        gold_entities, predicted = spans(g), spans(p)
        errors.append(
            {
                "row": info["rows"][k],
                "text": separator.join(words),
                "gold": gold_entities,
                "predicted": predicted,
                "missed": [e for e in gold_entities if e not in predicted],
                "spurious": [e for e in predicted if e not in gold_entities],
            }
        )
    return errors


def sentence_predictions(
    info: dict[str, Any], preds: Any, labels: list[str]
) -> tuple[list[list[str]], list[list[str]]]:
    """Gold and predicted tags of the scored words of every sentence, from window predictions.

    :param preds: predicted label ids per window and token position (``-100`` padding allowed).
    :returns: ``(gold, predicted)``; each sentence is cut to the words some window covers (all of
        them, unless ``options.overflow = "truncate"``).
    """
    windows = info["windows"]
    if len(preds) != len(windows):
        raise NlptasksError(f"internal error: {len(preds)} predictions for {len(windows)} windows")
    window_preds = [
        [labels[int(preds[w][pos])] if pos >= 0 else None for pos in win.first] for w, win in enumerate(windows)
    ]
    merged = merge(windows, window_preds, info["lengths"], default="O")
    covered = [0] * len(info["lengths"])
    for win in windows:
        covered[win.sentence] = max(covered[win.sentence], win.end)
    gold = [g[:n] for g, n in zip(info["gold"], covered, strict=True)]
    pred = [p[:n] for p, n in zip(merged, covered, strict=True)]
    return gold, pred
