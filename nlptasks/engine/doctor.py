"""``nlptasks check RECIPE``: the data doctor.

Steps 1 to 3 of the recipe run (setup, load, split: the tokenizer at most, never model weights),
then every plugin's :func:`~nlptasks.hookspecs.nlptasks_check` reports *findings* about the data
before anything is trained: label sets that differ between splits, class balance, empty and
duplicate rows, rows shared by train and validation/test, and how much ``model.max_length`` would
cut.  A finding is an ``error`` (the run would stop, or its scores would mean little), a
``warning`` (the run goes on, but look) or ``info``.  Errors make the command exit non-zero.

The helpers below do the task-independent part of each check; a task plugin says which columns
hold its texts and labels and calls them (the engine knows no task by name)::

    @hookimpl
    def nlptasks_check(ctx, data):
        text = lambda row: row["text"]
        return [*blank_texts(ctx, data, ["text"]), *split_overlap(ctx, data, text), ...]
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from nlptasks.context import RunContext
from nlptasks.engine.data import ROW_COLUMN
from nlptasks.errors import NlptasksError
from nlptasks.plugins import Host, get_host
from nlptasks.recipe import LoadedRecipe

Level = Literal["error", "warning", "info"]
LEVELS: tuple[Level, ...] = ("error", "warning", "info")
EVAL_SPLITS = ("validation", "test")
SHOWN_ROWS = 8  # row numbers listed per finding (the JSON output has them all)
BALANCE_WARN = 10.0  # most / least frequent class in train at or above this is a warning
TRUNCATION_WARN = 0.05  # a share of truncated examples above this is a warning


@dataclass
class Finding:
    """One thing the doctor noticed.

    :param level: ``error``, ``warning`` or ``info``.
    :param check: a short stable id (``empty-text``, ``overlap``, ``truncation`` ...).
    :param message: one line, saying what to do where it is not obvious.
    :param split: the split it is about (``None``: the whole data).
    :param rows: the row numbers concerned (file lines for jsonl/CoNLL, rows for csv).
    """

    level: Level
    check: str
    message: str
    split: str | None = None
    rows: list[int] = field(default_factory=list)

    def line(self, sources: dict[str, str]) -> str:
        where = f"{sources.get(self.split, self.split)}: " if self.split else ""
        rows = ""
        if self.rows:
            shown = ", ".join(map(str, self.rows[:SHOWN_ROWS]))
            more = f" and {len(self.rows) - SHOWN_ROWS} more" if len(self.rows) > SHOWN_ROWS else ""
            rows = f" (rows {shown}{more})"
        return f"{self.level}: [{self.check}] {where}{self.message}{rows}"


@dataclass
class Report:
    """What ``nlptasks check`` prints: the findings, most serious first."""

    recipe: str
    task: str
    sizes: dict[str, int]
    sources: dict[str, str]
    findings: list[Finding]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "task": self.task,
            "ok": not self.errors,
            "sizes": self.sizes,
            "sources": self.sources,
            "findings": [asdict(f) for f in self.findings],
        }

    def text(self) -> str:
        sizes = ", ".join(f"{split} {n:,}" for split, n in self.sizes.items()) or "no data"
        lines = [f"check {self.recipe}: task {self.task!r}, {sizes} rows"]
        lines += [f.line(self.sources) for f in self.findings]
        n_err, n_warn = len(self.errors), len(self.warnings)
        if n_err:
            lines.append(f"{n_err} error(s), {n_warn} warning(s): fix the errors before `nlptasks run {self.recipe}`")
        else:
            lines.append(f"ok: no errors, {n_warn} warning(s); next: nlptasks run {self.recipe}")
        return "\n".join(lines)


def check(loaded: LoadedRecipe, host: Host | None = None) -> Report:
    """Run steps 1 to 3 of ``loaded`` in a throw-away folder, then every ``nlptasks_check``."""
    from nlptasks.engine.runner import _library_progress_bars

    host = host or get_host()
    source = str(loaded.path or "<recipe>")
    tmp = tempfile.mkdtemp(prefix="nlptasks-check-")
    ctx = RunContext(recipe=loaded.recipe, task=loaded.task, options=loaded.options, output_dir=Path(tmp) / "run")
    hooks = host.hooks_for(loaded.task)
    findings: list[Finding] = []
    sizes: dict[str, int] = {}
    with _library_progress_bars(False):
        try:
            hooks.nlptasks_setup(ctx=ctx)
            raw = hooks.nlptasks_load_data(ctx=ctx)
            data = hooks.nlptasks_split(ctx=ctx, data=raw)
        except NlptasksError as exc:  # the data cannot even be read: that is the one finding
            findings.append(Finding("error", "load", exc.render().replace("\n", " ")))
            return Report(source, loaded.task.name, sizes, dict(ctx.sources), findings)
        sizes = {split: len(ds) for split, ds in data.items()}
        for split, n in sizes.items():
            if n == 0:
                findings.append(Finding("error", "empty-split", "no rows", split))
        for split, reasons in ctx.dropped.items():  # counted skips the recipe allowed while loading
            for reason, n in reasons.items():
                findings.append(Finding("warning", "skipped", f"{n} row(s) skipped while loading ({reason})", split))
        for result in hooks.nlptasks_check(ctx=ctx, data=data):
            findings += result or []
    if not any(True for _ in _implementations(host, loaded)):
        findings.append(Finding("info", "no-checks", f"the {loaded.task.plugin} plugin contributes no data checks"))
    order = {level: i for i, level in enumerate(LEVELS)}
    findings.sort(key=lambda f: order[f.level])
    return Report(source, loaded.task.name, sizes, dict(ctx.sources), findings)


def _implementations(host: Host, loaded: LoadedRecipe) -> Iterable[Any]:
    """The check implementations of the task's plugin."""
    for impl in host.pm.hook.nlptasks_check.get_hookimpls():
        if impl.plugin_name == loaded.task.plugin:
            yield impl


# ---------------------------------------------------------------------------------------------
# Helpers for plugins
# ---------------------------------------------------------------------------------------------


def row_numbers(ds: Any) -> list[int]:
    """The file row number of each example (1, 2, ... when the loader kept none)."""
    for column in (ROW_COLUMN, "__line__"):
        if column in ds.column_names:
            return list(ds[column])
    return list(range(1, len(ds) + 1))


def is_blank(value: Any) -> bool:
    """``None``, an empty or whitespace-only string, or an empty list."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (list, tuple)):
        return len(value) == 0 or all(is_blank(v) for v in value)
    return False


def blank_texts(ctx: RunContext, data: Any, columns: Iterable[str], level: Level = "warning",
                consequence: str = "a run drops these rows") -> list[Finding]:
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
                out.append(Finding(level, "empty-text", f"{what} {column!r} value(s); {consequence}", split,
                                   sorted(empty + spaces)))
    return out


def duplicates(ctx: RunContext, data: Any, key: Callable[[dict[str, Any]], Hashable],
               label: Callable[[dict[str, Any]], Hashable] | None = None, what: str = "text") -> list[Finding]:
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
            out.append(Finding("warning", "conflicting-duplicates",
                               f"{len(conflicting)} row(s) repeat an earlier {what} with a different label", split,
                               conflicting))
        if repeated:
            share = len(repeated) / max(1, len(ds))
            out.append(Finding("warning", "duplicates",
                               f"{len(repeated)} row(s) ({share:.1%}) repeat an earlier {what} of this split", split,
                               repeated))
    return out


def split_overlap(ctx: RunContext, data: Any, key: Callable[[dict[str, Any]], Hashable],
                  what: str = "text") -> list[Finding]:
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
            out.append(Finding("warning", "overlap",
                               f"{len(shared)} row(s) ({share:.1%}) have a {what} that is also in train: "
                               "scores on them measure memory, not generalisation", split, shared))
    return out


def label_sets(ctx: RunContext, data: Any, labels_of: Callable[[dict[str, Any]], Iterable[Hashable]],
               known: Iterable[Hashable] | None = None, known_from: str = "train",
               unknown_level: Level = "error", hint: str = "") -> list[Finding]:
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
            out.append(Finding(unknown_level, "unknown-labels",
                               f"label(s) {names} do not occur in {known_from}{hint}", split, rows))
        if split != "train":
            missing = [x for x in reference if x not in present]
            if missing and len(ds):
                out.append(Finding("info", "absent-labels",
                                   f"{', '.join(repr(x) for x in sorted(missing, key=str))} never occur(s) here",
                                   split))
    return out


def balance(ctx: RunContext, data: Any, labels_of: Callable[[dict[str, Any]], Iterable[Hashable]],
            what: str = "labels") -> list[Finding]:
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
                out.append(Finding("warning", "imbalance",
                                   f"the most frequent of the {what} is {most / least:.0f}× the rarest "
                                   f"({', '.join(map(repr, rare))}: {least}); look at per-class scores, not "
                                   "accuracy alone", split))
    return out


def truncation(split: str, rows: list[int], examples: int, gold: int | None = None, gold_cut: int | None = None,
               max_length: int = 0, consequence: str = "cut to model.max_length",
               what: str = "example(s)") -> Finding:
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
