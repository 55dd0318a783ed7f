"""``cls`` with ``options.multi_label = true``: any number of labels per text, zero included.

One sigmoid probability per label (transformers' ``problem_type="multi_label_classification"``
head, binary cross-entropy); a label is predicted where its probability reaches its threshold.

**Labels in the data.** A JSON list in jsonl/json (``["joy", "optimism"]``), or in any format a
string of labels joined by ``options.separator`` (``joy|optimism``); an empty list, an empty cell or
a missing value means "no label" (a valid row).  The label set is the training data's (sorted), or
``options.labels``; a label that only validation or test use is an error naming the row.

**Thresholds** (``options.threshold``): with ``per_label`` (default) or ``global``, they are chosen
on the validation split each time it is scored (:func:`nlptasks.plugin.choose_thresholds`: the best
micro-F1 threshold for all labels, and each label's best-F1 threshold where validation has at least
``MIN_SUPPORT`` examples of it), so checkpoints are compared as they will be used; the thresholds
of the final validation scoring (the best checkpoint) are recorded in the run's ``nlptasks.json``
(``thresholds``) and used for test, ``nlptasks eval``, ``infer``, ``serve``, ONNX exports and
``nlptasks.load``.  A number fixes one threshold for every label (nothing chosen).  Validation
figures are therefore measured on the rows the thresholds were chosen on; test is the held-out
figure.  ``*_untuned`` metrics give the same model's figures at 0.5, the gain of the choice.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from nlptasks.plugin import (
    UNKNOWN_LABEL,
    DataError,
    Evaluation,
    Finding,
    RunContext,
    choose_thresholds,
    filter_rows,
    label_config,
    label_text,
    load_model,
    multilabel_report,
    per_class_table,
    row_numbers,
    sigmoid,
    sort_labels,
)

from .encoding import check_labels, encode_splits
from .separators import refuse_another_separator, separator_finding

MIN_SUPPORT = 5
"""Validation examples a label needs for a threshold of its own (else the global one)."""

METRICS = (
    "f1_micro",
    "precision_micro",
    "recall_micro",
    "f1_macro",
    "precision_macro",
    "recall_macro",
    "exact_match",
    "jaccard",
    "f1_micro_untuned",
    "f1_macro_untuned",
    "f1/<label>",
    "precision/<label>",
    "recall/<label>",
    "support/<label>",
    "threshold/<label>",
)


class LabelsError(ValueError):
    """A labels cell that is not text or a list of texts."""


def parse_labels(value: Any, separator: str) -> list[str]:
    """One cell → its labels, stripped, in order, repeats and empty parts dropped.

    ``"joy|optimism"`` (separator ``|``) and ``["joy", "optimism"]`` both give ``["joy",
    "optimism"]``; ``None``, NaN, ``""`` and ``[]`` give ``[]``.  A dict, or a list holding lists or
    dicts, raises :class:`LabelsError`."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return []
    if isinstance(value, dict):
        raise LabelsError(f"the labels are a JSON object ({_short(value)}); give a list of labels or a string")
    if isinstance(value, (list, tuple)):
        parts = []
        for item in value:
            if isinstance(item, (list, tuple, dict)):
                raise LabelsError(f"the labels list holds {_short(item)}; each label must be a string or a number")
            parts.append(item)
    else:
        parts = str(value).split(separator)
    out: list[str] = []
    for part in parts:
        label = label_text(part)
        if label is not None and label not in out:
            out.append(label)
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _parsed(ctx: RunContext, split: str, ds: Any) -> list[list[str]]:
    """Every row's labels, a malformed cell stopping the run with its file and row."""
    opts = ctx.options
    out = []
    for row, value in zip(row_numbers(ds), ds[opts.label_column], strict=True):
        try:
            out.append(parse_labels(value, opts.separator))
        except LabelsError as exc:
            raise DataError(
                f"column {opts.label_column!r}: {exc}",
                path=ctx.sources.get(split, split),
                row=row,
                hint='Write the labels as a JSON list (["joy", "fear"]) or joined by options.separator.',
            ) from None
    return out


# --- step 4 -------------------------------------------------------------------------------------


def preprocess(ctx: RunContext, data: Any) -> Any:
    """Rows without text dropped (counted); labels parsed, checked and encoded multi-hot."""
    from datasets import DatasetDict

    opts = ctx.options

    def empty_text(row: dict[str, Any]) -> str | None:
        text = row[opts.text_column]
        return "empty text" if text is None or not str(text).strip() else None

    data = DatasetDict({split: filter_rows(ctx, split, ds, empty_text) for split, ds in data.items()})
    if ctx.trained_run is not None:  # nlptasks eval: the run's labels; rows with others are counted, not scored
        known = set(ctx.labels or [])

        def unknown(row: dict[str, Any]) -> str | None:
            return None if set(parse_labels(row[opts.label_column], opts.separator)) <= known else UNKNOWN_LABEL

        data = DatasetDict({split: filter_rows(ctx, split, ds, unknown) for split, ds in data.items()})
        return _encode(ctx, data, list(ctx.labels or []))

    parsed = {split: _parsed(ctx, split, ds) for split, ds in data.items()}
    for split, rows in parsed.items():
        refuse_another_separator(ctx, split, list(row_numbers(data[split])), rows)
    if opts.labels is not None:
        labels, origin = [label_text(x) or "" for x in opts.labels], "options.labels"
    else:
        labels, origin = sort_labels({x for row in parsed["train"] for x in row}), "the training data"
        if not labels:
            raise DataError(
                f"no row of the training data has a label (column {opts.label_column!r}, separator {opts.separator!r})",
                path=ctx.sources.get("train"),
                hint="Check options.label_column and options.separator (`nlptasks check RECIPE` shows the columns).",
            )
    for split, rows in parsed.items():
        if split != "train" or opts.labels is not None:
            check_labels(ctx, split, row_numbers(data[split]), rows, labels, origin)
    ctx.labels = labels
    return _encode(ctx, data, labels)


def _encode(ctx: RunContext, data: Any, labels: list[str]) -> Any:
    """Tokenize every split; ``labels`` a float multi-hot vector (what binary cross-entropy takes)."""
    separator, index = ctx.options.separator, {name: i for i, name in enumerate(labels)}

    def multi_hot(cell: Any) -> list[float]:
        vector = [0.0] * len(labels)
        for name in parse_labels(cell, separator):
            vector[index[name]] = 1.0
        return vector

    def counts(vectors: list[list[float]]) -> str:
        found = Counter({name: 0 for name in labels})
        for vector in vectors:
            found.update(name for name, v in zip(labels, vector, strict=True) if v)
        none = sum(not any(v) for v in vectors)
        return ", ".join(f"{k} {v}" for k, v in found.items()) + f"; {none} row(s) with no label"

    out = encode_splits(ctx, data, labels, multi_hot, counts)
    ctx.manifest["multi_label"] = True
    if ctx.trained_run is None and "train" in out and len(out["train"]):
        vectors = out["train"]["labels"]
        floor = 1 / (2 * len(vectors))  # a label train never has: as if half a row had it
        ctx.manifest["train_label_rates"] = {
            name: round(min(1 - floor, max(floor, sum(v[j] for v in vectors) / len(vectors))), 6)
            for j, name in enumerate(labels)
        }
    return out


# --- step 5 ---------------------------------------------------------------------------------------


def build_model(ctx: RunContext) -> Any:
    """The classifier with a sigmoid per label; a new head starts at the labels' base rates."""
    model = load_model(
        ctx,
        "AutoModelForSequenceClassification",
        problem_type="multi_label_classification",
        **label_config(ctx.labels or []),
    )
    if ctx.trained_run is None:
        start_at_base_rates(ctx, model)
    return model


def start_at_base_rates(ctx: RunContext, model: Any) -> None:
    """Set a new head's output bias to each label's log odds in the training data.

    A zero bias predicts 0.5 for every label; binary cross-entropy then spends the first part of
    training pulling every output down to its label's rate, and on a few thousand rows a pretrained
    encoder stays there long (MiniLM on GoEmotions: the base rates for a whole epoch, one seed of
    three for two).  Starting at the rates (the prior initialisation of Lin et al. 2017, "Focal Loss",
    section 3.3) leaves training the part that depends on the text.  A head whose bias is not all
    zeros (a trained classifier given as ``model.name_or_path``) is left as it is."""
    import math

    import torch

    rates = ctx.manifest.get("train_label_rates") or {}
    labels = list(ctx.labels or [])
    heads = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features == len(labels)]
    if not heads or heads[-1].bias is None or not rates:
        return
    bias = heads[-1].bias
    if bool(bias.detach().abs().sum() > 0):
        ctx.log.info("the classifier's bias is not new: left as loaded")
        return
    odds = [math.log(rates[name] / (1 - rates[name])) for name in labels]
    with torch.no_grad():
        bias.copy_(torch.tensor(odds, dtype=bias.dtype))
    ctx.log.info(
        "the classifier's bias starts at the labels' training rates (log odds %.2f to %.2f)", min(odds), max(odds)
    )


# --- thresholds -----------------------------------------------------------------------------------


def recorded_cuts(record: dict[str, Any] | None, labels: list[str], mode: Any) -> list[float]:
    """The per-label thresholds that a run's ``thresholds`` record gives in ``mode`` (``per_label``,
    ``global``, or a number: that number for every label); 0.5 when nothing was recorded."""
    if isinstance(mode, (int, float)) and not isinstance(mode, bool):
        return [float(mode)] * len(labels)
    if not record:
        return [0.5] * len(labels)
    if mode == "global" or not isinstance(record.get("per_label"), dict):
        return [float(record["global"])] * len(labels)
    per_label = record["per_label"]
    return [float(per_label.get(name, record["global"])) for name in labels]


def cuts_for(ctx: RunContext, evaluation: Evaluation, probs: Any) -> list[float]:
    """The thresholds that score this evaluation (see the module docstring): chosen on it when it is
    the validation split of a training run, else the recorded ones (``nlptasks eval``: the run's)."""
    opts, labels = ctx.options, list(ctx.labels or [])
    mode = opts.threshold
    if ctx.trained_run is not None:
        return recorded_cuts((ctx.trained_manifest or {}).get("thresholds"), labels, mode)
    if isinstance(mode, float):
        ctx.manifest["thresholds"] = {"mode": "fixed", "global": mode}
        return [mode] * len(labels)
    if evaluation.split == "validation":
        chosen = choose_thresholds(probs, evaluation.label_ids, min_support=MIN_SUPPORT)
        ctx.manifest["thresholds"] = {
            "mode": mode,
            "global": chosen["global"],
            "per_label": dict(zip(labels, chosen["per_label"], strict=True)),
            "global_for": [labels[j] for j in chosen["fallback"]],
            "chosen_on": "validation",
            "examples": len(probs),
            "min_support": MIN_SUPPORT,
        }
    elif "thresholds" not in ctx.manifest:
        ctx.log.warning("no validation split to choose thresholds on: %s is scored at 0.5", evaluation.split)
        ctx.manifest["thresholds"] = {"mode": "fixed", "global": 0.5, "why": "no validation split"}
    record = ctx.manifest["thresholds"]
    return recorded_cuts(record, labels, record["global"] if record["mode"] == "fixed" else mode)


# --- step 6, errors, card --------------------------------------------------------------------------


def _probs(evaluation: Evaluation) -> Any:
    logits = evaluation.predictions[0] if isinstance(evaluation.predictions, tuple) else evaluation.predictions
    return sigmoid(logits)


def metrics(ctx: RunContext) -> Any:
    labels = list(ctx.labels or [])

    def compute_metrics(evaluation: Evaluation) -> dict[str, float]:
        probs = _probs(evaluation)
        cuts = cuts_for(ctx, evaluation, probs)
        out = multilabel_report(probs, evaluation.label_ids, labels, cuts)
        untuned = multilabel_report(probs, evaluation.label_ids, labels, 0.5)
        out["f1_micro_untuned"] = untuned["f1_micro"]
        out["f1_macro_untuned"] = untuned["f1_macro"]
        return out

    return compute_metrics


def errors(ctx: RunContext, evaluation: Evaluation) -> list[dict[str, Any]]:
    """Every text whose predicted label set is not its gold set: ``missed`` and ``extra`` labels,
    with every label's probability."""
    import numpy as np

    labels = list(ctx.labels or [])
    probs = _probs(evaluation)
    cuts = np.asarray(cuts_for(ctx, evaluation, probs))
    predicted = probs >= cuts
    gold = np.asarray(evaluation.label_ids) >= 0.5
    rows = evaluation.side.get("rows") or list(range(1, len(gold) + 1))
    texts = evaluation.side.get("texts") or [None] * len(gold)
    out = []
    for i in np.flatnonzero((predicted != gold).any(1)):
        out.append(
            {
                "row": int(rows[i]),
                "text": texts[i],
                "gold": [labels[j] for j in np.flatnonzero(gold[i])],
                "predicted": [labels[j] for j in np.flatnonzero(predicted[i])],
                "missed": [labels[j] for j in np.flatnonzero(gold[i] & ~predicted[i])],
                "extra": [labels[j] for j in np.flatnonzero(predicted[i] & ~gold[i])],
                "scores": {labels[j]: round(float(probs[i, j]), 6) for j in range(len(labels))},
            }
        )
    return out


def report(ctx: RunContext, metrics_by_split: dict[str, Any]) -> list[str]:
    """The card's per-label table (test, else validation) and how the thresholds were chosen."""
    split = next((s for s in ("test", "validation") if metrics_by_split.get(s)), None)
    if split is None:
        return []
    figures = metrics_by_split[split]
    sections = []
    per_label = {k: v for k, v in figures.items() if "/" in k}
    if per_label:
        sections.append(f"## Per label ({split})\n\n" + per_class_table(per_label, title="label"))
    record = ctx.manifest.get("thresholds") or {}
    if record.get("mode") == "fixed":
        how = f"One fixed threshold for every label: {record['global']:g}" + (
            f" ({record['why']})." if record.get("why") else " (`options.threshold`)."
        )
    elif record:
        rare = record.get("global_for") or []
        how = (
            f"Chosen on the validation split ({record['examples']} examples) after training, from "
            f"0.05 to 0.95 in steps of 0.05: global {record['global']:g} (best micro F1)"
            + (
                "; per label, each label's best F1 (the table's `threshold` column)"
                if record["mode"] == "per_label"
                else '; used for every label (`options.threshold = "global"`)'
            )
            + (
                f"; labels with fewer than {record['min_support']} validation examples use the global one: "
                + ", ".join(rare)
                if rare and record["mode"] == "per_label"
                else ""
            )
            + ". `nlptasks infer --threshold T` overrides them."
        )
    else:
        return sections
    lines = [
        how,
        "",
        "| split | macro F1 at 0.5 | macro F1 | micro F1 at 0.5 | micro F1 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("validation", "test"):
        m = metrics_by_split.get(name) or {}
        if "f1_macro_untuned" in m:
            lines.append(
                f"| {name} | {m['f1_macro_untuned']:.4f} | {m['f1_macro']:.4f} | "
                f"{m['f1_micro_untuned']:.4f} | {m['f1_micro']:.4f} |"
            )
    sections.append("## Thresholds\n\n" + "\n".join(lines))
    return sections


# --- nlptasks check --------------------------------------------------------------------------------


def check(ctx: RunContext, data: Any) -> tuple[list[Finding], Any]:
    """Findings of the labels (unparseable cells, rows without a label, labels a split never
    uses, co-occurring labels) and the ``labels_of`` function for the shared checks."""
    opts = ctx.options
    findings: list[Finding] = []
    parsed: dict[str, dict[int, list[str]]] = {}
    for split, ds in data.items():
        rows: dict[int, list[str]] = {}
        bad = []
        for number, value in zip(row_numbers(ds), ds[opts.label_column], strict=True):
            try:
                rows[number] = parse_labels(value, opts.separator)
            except LabelsError as exc:
                bad.append(number)
                reason = str(exc)
        if bad:
            findings.append(
                Finding("error", "labels", f"{len(bad)} row(s) with unreadable labels: {reason}", split, bad)
            )
        parsed[split] = rows
        found = separator_finding(rows, opts, split)
        if found is not None:
            findings.append(found)
        empty = [n for n, labels in rows.items() if not labels]
        if empty:
            findings.append(
                Finding(
                    "info",
                    "no-label",
                    f"{len(empty)} of {len(rows)} row(s) have no label (valid: the model learns to predict none)",
                    split,
                    empty,
                )
            )
    known = list(opts.labels) if opts.labels else sort_labels({x for r in parsed.get("train", {}).values() for x in r})
    for split, rows in parsed.items():
        used = {x for r in rows.values() for x in r}
        unused = [x for x in known if x not in used]
        if unused and rows:
            findings.append(
                Finding(
                    "warning" if split == "train" else "info",
                    "unused-label",
                    f"label(s) with no example in {split}: {', '.join(unused)}"
                    + ("; the model cannot learn them" if split == "train" else "; their per-label figures are 0"),
                    split,
                )
            )
    if "train" in parsed:
        rows = list(parsed["train"].values())
        if rows and all(len(r) <= 1 for r in rows):
            findings.append(
                Finding(
                    "info",
                    "one-label-rows",
                    "no training row has more than one label: if each text has exactly one, "
                    "options.multi_label = false (softmax over the labels) fits better",
                    "train",
                )
            )
        pairs = Counter((a, b) for r in rows for i, a in enumerate(sorted(r)) for b in sorted(r)[i + 1 :])
        if pairs:
            top = ", ".join(f"{a}+{b} {n}" for (a, b), n in pairs.most_common(5))
            multi = sum(len(r) > 1 for r in rows)
            findings.append(
                Finding(
                    "info",
                    "co-occurrence",
                    f"{multi} of {len(rows)} row(s) have several labels; most frequent pairs: {top}",
                    "train",
                )
            )

    def labels_of(row: dict[str, Any]) -> list[str]:
        try:
            return parse_labels(row[opts.label_column], opts.separator)
        except LabelsError:
            return []

    return findings, labels_of


# --- step 10 ---------------------------------------------------------------------------------------


def decide(probs: Any, cuts: list[float], id2label: dict[int, str]) -> list[dict[str, Any]]:
    """Per example: ``labels`` (every label at or above its threshold, in the run's label order)
    and ``scores`` (every label's probability)."""
    out = []
    for p in probs:
        out.append(
            {
                "labels": [id2label[j] for j in range(len(p)) if p[j] >= cuts[j]],
                "scores": {id2label[j]: round(float(v), 6) for j, v in enumerate(p)},
            }
        )
    return out
