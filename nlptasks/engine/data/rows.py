"""Rows with their file row numbers: the column checks and counted drops every task's step 4 needs.

Default step 2 gives every split a ``__row__`` column (:data:`~nlptasks.engine.data.reading.ROW_COLUMN`):
each row's number in its file, 1-based, header excluded (for jsonl: the line).  These helpers keep
it through filtering so that every error can name the file and row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from nlptasks.context import RunContext
from nlptasks.engine.data.reading import ROW_COLUMN
from nlptasks.errors import DataError

__all__ = [
    "INTERNAL_COLUMNS",
    "UNKNOWN_LABEL",
    "data_columns",
    "filter_rows",
    "require_columns",
    "row_numbers",
    "with_row_numbers",
]

UNKNOWN_LABEL = "label unknown to the run"
"""The reason step 4 drops a row under ``nlptasks eval`` (``ctx.trained_run`` set) whose label the
run never saw: counted and reported, where a run would stop with an error."""


INTERNAL_COLUMNS = (ROW_COLUMN, "__line__")
"""Columns the loaders add (each row's number in its file): never a user's column."""


def data_columns(columns: Any) -> list[str]:
    """The columns of a file as its user wrote them: ``columns`` (names, or a dataset) without the
    ones the loaders add (:data:`INTERNAL_COLUMNS`), for a message that lists them."""
    names = columns.column_names if hasattr(columns, "column_names") else columns
    return [c for c in names if c not in INTERNAL_COLUMNS]


def row_numbers(ds: Any) -> list[int]:
    """The file row number of each example (1, 2, ... when the loader kept none)."""
    for column in INTERNAL_COLUMNS:
        if column in ds.column_names:
            return list(ds[column])
    return list(range(1, len(ds) + 1))


def with_row_numbers(ds: Any) -> Any:
    """``ds`` with a ``__row__`` column (1, 2, ... when the loader kept none, e.g. a plugin's own
    step 2)."""
    if ROW_COLUMN in ds.column_names:
        return ds
    return ds.add_column(ROW_COLUMN, list(range(1, len(ds) + 1)))


def require_columns(ctx: RunContext, data: Any, columns: Mapping[str, str]) -> None:
    """Every split has the columns the options name, else a :class:`DataError` naming the file,
    the option, the columns there are, and the ``--set`` that picks another.

    :param columns: option key → column name, e.g. ``{"text_column": opts.text_column}``.
    """
    for split, ds in data.items():
        for key, column in columns.items():
            if column not in ds.column_names:
                present = ", ".join(c for c in ds.column_names if c != ROW_COLUMN)
                raise DataError(
                    f"no column {column!r} (options.{key}); the columns are: {present}",
                    path=ctx.sources.get(split, split),
                    hint=f"Name the right column with --set options.{key}=NAME.",
                )


def filter_rows(
    ctx: RunContext,
    split: str,
    ds: Any,
    problem: Callable[[dict[str, Any]], str | None],
    on_problem: Literal["drop", "error"] = "drop",
    hint: str | None = None,
) -> Any:
    """The rows of ``ds`` for which ``problem(row)`` is ``None``.

    A row with a problem (the function returns its reason, e.g. ``"empty text"``) is dropped and
    counted under that reason (:meth:`RunContext.drop`: logged, saved in ``metrics.json``), or with
    ``on_problem="error"`` stops the run with a :class:`DataError` naming the file, the row and
    ``hint``.  A split left without rows is an error.  The ``__row__`` column is kept (added when
    missing).
    """
    ds = with_row_numbers(ds)
    keep: list[int] = []
    dropped: dict[str, int] = {}
    where = ctx.sources.get(split, split)
    for i, row in enumerate(ds):
        reason = problem(row)
        if reason is None:
            keep.append(i)
        elif on_problem == "error":
            raise DataError(reason, path=where, row=row[ROW_COLUMN], hint=hint)
        else:
            dropped[reason] = dropped.get(reason, 0) + 1
    for reason, n in dropped.items():
        ctx.drop(split, reason, n)
    if not keep:
        counts = ", ".join(f"{n} {reason}" for reason, n in dropped.items())
        raise DataError(f"no rows left after dropping the unusable ones ({counts or 'the split is empty'})", path=where)
    return ds.select(keep) if len(keep) < len(ds) else ds
