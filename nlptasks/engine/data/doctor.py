"""The data doctor's helpers: the task-independent part of each check of ``nlptasks check``.

A task plugin's :func:`~nlptasks.hookspecs.nlptasks_check` says which columns hold its texts and
labels and calls these (the engine knows no task by name); each returns
:class:`~nlptasks.types.Finding` s::

    @hookimpl
    def nlptasks_check(ctx, data):
        text = lambda row: row["text"]
        return [*blank_texts(ctx, data, ["text"]), *split_overlap(ctx, data, text), ...]

A finding is an ``error`` (the run would stop, or its scores would mean little), a ``warning``
(the run goes on, but look) or ``info``.  The command itself is :mod:`nlptasks.pipeline.check`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from nlptasks.context import RunContext
from nlptasks.engine.data.rows import row_numbers
from nlptasks.types import Finding, Level

__all__ = [
    "BALANCE_WARN",
    "TRUNCATION_WARN",
    "balance",
    "blank_texts",
    "duplicates",
    "is_blank",
    "label_sets",
    "row_numbers",
    "split_overlap",
    "truncation",
]

EVAL_SPLITS = ("validation", "test")
BALANCE_WARN = 10.0  # most / least frequent class in train at or above this is a warning
TRUNCATION_WARN = 0.05  # a share of truncated examples above this is a warning


def is_blank(value: Any) -> bool:
    """``None``, an empty or whitespace-only string, or an empty list."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (list, tuple)):
        return len(value) == 0 or all(is_blank(v) for v in value)
    return False


def blank_texts(
    ctx: RunContext,
    data: Any,
    columns: Iterable[str],
    level: Level = "warning",
    consequence: str = "a run drops these rows",
) -> list[Finding]:
    """Rows whose text column is missing, empty or whitespace only (one finding per split and
    column, telling empty from whitespace-only)."""
    out = []
    for split, ds in data.items():
        rows = row_numbers(ds)
        for column in columns:
            if column not in ds.column_names:
                continue
            empty, spaces = [], []
            for number, value in zip(rows, ds[column], strict=True):
                if value is None or (isinstance(value, (str, list, tuple)) and len(value) == 0):
                    empty.append(number)
                elif is_blank(value):
                    spaces.append(number)
            parts = [f"{len(empty)} empty" if empty else "", f"{len(spaces)} whitespace-only" if spaces else ""]
            if empty or spaces:
                what = " and ".join(p for p in parts if p)
                out.append(
                    Finding(
                        level, "empty-text", f"{what} {column!r} value(s); {consequence}", split, sorted(empty + spaces)
                    )
                )
    return out


def duplicates(
    ctx: RunContext,
    data: Any,
    key: Callable[[dict[str, Any]], Hashable],
    label: Callable[[dict[str, Any]], Hashable] | None = None,
    what: str = "text",
) -> list[Finding]:
    """Repeated examples within each split (same ``key``), and, with ``label``, repeats that
    disagree on the label (warning: the data contradicts itself)."""
    out = []
    for split, ds in data.items():
        seen: dict[Hashable, tuple[int, Hashable]] = {}
        repeated, conflicting = [], []
        for number, row in zip(row_numbers(ds), ds, strict=True):
            k = key(row)
            if k is None or is_blank(k):
                continue
            lab = label(row) if label else None
            if k in seen:
                repeated.append(number)
                if label and seen[k][1] != lab:
                    conflicting.append(number)
            else:
                seen[k] = (number, lab)
        if conflicting:
            out.append(
                Finding(
                    "warning",
                    "conflicting-duplicates",
                    f"{len(conflicting)} row(s) repeat an earlier {what} with a different label",
                    split,
                    conflicting,
                )
            )
        if repeated:
            share = len(repeated) / max(1, len(ds))
            out.append(
                Finding(
                    "warning",
                    "duplicates",
                    f"{len(repeated)} row(s) ({share:.1%}) repeat an earlier {what} of this split",
                    split,
                    repeated,
                )
            )
    return out


def split_overlap(
    ctx: RunContext, data: Any, key: Callable[[dict[str, Any]], Hashable], what: str = "text"
) -> list[Finding]:
    """Validation/test rows whose ``key`` also occurs in train: their scores measure memory."""
    if "train" not in data:
        return []
    train = {key(row) for row in data["train"]}
    out = []
    for split in EVAL_SPLITS:
        if split not in data:
            continue
        ds = data[split]
        shared = [n for n, row in zip(row_numbers(ds), ds, strict=True) if key(row) in train and not is_blank(key(row))]
        if shared:
            share = len(shared) / max(1, len(ds))
            out.append(
                Finding(
                    "warning",
                    "overlap",
                    f"{len(shared)} row(s) ({share:.1%}) have a {what} that is also in train: "
                    "scores on them measure memory, not generalisation",
                    split,
                    shared,
                )
            )
    return out


def label_sets(
    ctx: RunContext,
    data: Any,
    labels_of: Callable[[dict[str, Any]], Iterable[Hashable]],
    known: Iterable[Hashable] | None = None,
    known_from: str = "train",
    unknown_level: Level = "error",
    hint: str = "",
) -> list[Finding]:
    """Labels of validation/test that train (or ``known``) lacks (``unknown_level``), and labels
    of train that an evaluation split never has (info: never scored there)."""
    if "train" not in data and known is None:
        return []
    train = Counter(label for row in data["train"] for label in labels_of(row)) if "train" in data else Counter()
    reference = set(known) if known is not None else set(train)
    out = []
    for split, ds in data.items():
        if known is None and split == "train":
            continue
        unknown: dict[Hashable, list[int]] = {}
        present: set[Hashable] = set()
        for number, row in zip(row_numbers(ds), ds, strict=True):
            for label in labels_of(row):
                present.add(label)
                if label not in reference:
                    unknown.setdefault(label, []).append(number)
        if unknown:
            names = ", ".join(repr(x) for x in sorted(unknown, key=str))
            rows = sorted({n for rs in unknown.values() for n in rs})
            out.append(
                Finding(
                    unknown_level, "unknown-labels", f"label(s) {names} do not occur in {known_from}{hint}", split, rows
                )
            )
        if split != "train":
            missing = [x for x in reference if x not in present]
            if missing and len(ds):
                out.append(
                    Finding(
                        "info",
                        "absent-labels",
                        f"{', '.join(repr(x) for x in sorted(missing, key=str))} never occur(s) here",
                        split,
                    )
                )
    return out


def balance(
    ctx: RunContext, data: Any, labels_of: Callable[[dict[str, Any]], Iterable[Hashable]], what: str = "labels"
) -> list[Finding]:
    """The label counts of each split (info), and a warning when train is badly imbalanced."""
    out = []
    for split, ds in data.items():
        counts = Counter(label for row in ds for label in labels_of(row))
        if not counts:
            continue
        total = sum(counts.values())
        listing = ", ".join(f"{k} {v} ({v / total:.0%})" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        out.append(Finding("info", "balance", f"{what}: {listing}", split))
        if split == "train" and len(counts) > 1:
            most, least = max(counts.values()), min(counts.values())
            if most / least >= BALANCE_WARN:
                rare = [k for k, v in counts.items() if v == least]
                out.append(
                    Finding(
                        "warning",
                        "imbalance",
                        f"the most frequent of the {what} is {most / least:.0f}× the rarest "
                        f"({', '.join(map(repr, rare))}: {least}); look at per-class scores, not "
                        "accuracy alone",
                        split,
                    )
                )
    return out


def truncation(
    split: str,
    rows: list[int],
    examples: int,
    gold: int | None = None,
    gold_cut: int | None = None,
    max_length: int = 0,
    consequence: str = "cut to model.max_length",
    what: str = "example(s)",
) -> Finding:
    """How much ``model.max_length`` cuts in one split: the share of examples (and, where the task
    has several gold labels per example, of gold labels) beyond it.  A warning when gold labels
    are lost, or (without ``gold``) when more than ``TRUNCATION_WARN`` of the examples are cut."""
    total = max(1, examples)
    share = len(rows) / total
    text = f"{len(rows)} of {examples:,} {what} ({share:.1%}) are longer than model.max_length = {max_length}"
    if gold is not None and gold_cut is not None:
        text += f"; {gold_cut} of {gold:,} gold labels ({gold_cut / max(1, gold):.1%}) lost"
    if rows:
        text += f" ({consequence})"
    lossy = (gold_cut or 0) > 0 or (gold is None and share > TRUNCATION_WARN)
    level: Level = "warning" if lossy else "info"
    return Finding(level, "truncation", text, split, rows)
