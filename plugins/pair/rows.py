"""Step 4 of ``pair``: rows checked (empty sides, labels, scores) and the class list."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nlptasks.plugin import ROW_COLUMN, UNKNOWN_LABEL, DataError, RunContext, filter_rows, require_columns, sort_labels
from nlptasks.plugin import label_text as _label_text

if TYPE_CHECKING:
    from . import PairOptions

__all__ = ["class_labels", "clean", "row_problem", "score_value"]


def score_value(value: Any) -> float | None:
    import math

    text = _label_text(value)
    if text is None:
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def row_problem(a: Any, b: Any, label: Any, opts: PairOptions) -> str | None:
    if a is None or not str(a).strip():
        return f"empty {opts.text_a_column}"
    if b is None or not str(b).strip():
        return f"empty {opts.text_b_column}"
    if _label_text(label) is None:
        return "no label"
    if opts.label_type == "score" and score_value(label) is None:
        return "score is not a number"
    return None


def clean(ctx: RunContext, data: Any) -> Any:
    """Check columns; drop (counted) or reject rows with an empty side or a bad label."""
    from datasets import DatasetDict

    opts: PairOptions = ctx.options
    require_columns(
        ctx,
        data,
        {"text_a_column": opts.text_a_column, "text_b_column": opts.text_b_column, "label_column": opts.label_column},
    )

    def problem(row: dict[str, Any]) -> str | None:
        label = row[opts.label_column]
        reason = row_problem(row[opts.text_a_column], row[opts.text_b_column], label, opts)
        if reason == "score is not a number" and opts.bad_rows == "error":
            return f"{reason} (got {label!r})"
        return reason

    on_problem = "error" if opts.bad_rows == "error" else "drop"
    hint = "Fix the row, or drop such rows and count them with --set options.bad_rows=skip."
    data = DatasetDict({split: filter_rows(ctx, split, ds, problem, on_problem, hint) for split, ds in data.items()})
    if ctx.trained_run is not None and opts.label_type == "classes":  # nlptasks eval: only the run's labels are scored
        known = set(ctx.labels or [])
        data = DatasetDict(
            {
                split: filter_rows(
                    ctx, split, ds, lambda row: None if _label_text(row[opts.label_column]) in known else UNKNOWN_LABEL
                )
                for split, ds in data.items()
            }
        )
    return data


def class_labels(ctx: RunContext, data: Any) -> list[str]:
    """The class list (from options.labels or train); a label outside it names its file and row."""
    opts: PairOptions = ctx.options
    if ctx.trained_run is not None:  # nlptasks eval: the run's labels (rows with others were dropped)
        return list(ctx.labels or [])
    if opts.labels is not None:
        labels, origin, splits = list(opts.labels), "options.labels", list(data)
    else:
        labels = sort_labels({_label_text(v) for v in data["train"][opts.label_column]} - {None})  # type: ignore[arg-type]
        origin, splits = "the training data", [s for s in data if s != "train"]
    fractional = [v for v in labels if score_value(v) is not None and not float(v).is_integer()]
    if opts.labels is None and fractional and all(score_value(v) is not None for v in labels):
        raise DataError(
            f"the labels look like similarity scores ({len(labels)} distinct numbers such as "
            f'{fractional[0]!r}), but options.label_type is "classes"',
            path=ctx.sources.get("train"),
            hint="Train a regression head on the scores: --set options.label_type=score",
        )
    if len(labels) < 2:
        raise DataError(
            f"the training data has a single label ({labels[0]!r}); classes need at least two "
            '(for numeric similarity, set options.label_type = "score")',
            path=ctx.sources.get("train"),
        )
    known = set(labels)
    for split in splits:
        ds = data[split]
        for row, value in zip(ds[ROW_COLUMN], ds[opts.label_column], strict=True):
            if _label_text(value) not in known:
                raise DataError(
                    f"label {_label_text(value)!r} does not occur in {origin}; known labels: {', '.join(labels)}",
                    path=ctx.sources.get(split, split),
                    row=row,
                    hint="Fix the row, list every label in options.labels, or for numeric "
                    'similarity set options.label_type = "score".',
                )
    return labels
