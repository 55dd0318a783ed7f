"""Step 2, generic part: read csv/json/jsonl/txt/disk/hub data (splitting, step 3:
:mod:`nlptasks.engine.data.splitting`).

Local files are read with the standard library (``csv``, ``json``) so that every value stays as
the file spells it (labels ``"0"``/``"1"`` stay strings) and every error can name the file and
row; rows are numbered from 1, header excluded (for jsonl: the line number).  A ``.txt`` file is one
column, ``text``: each non-blank line is a row, numbered by its line (blank lines, which separate
paragraphs, are not rows).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlptasks.engine.io.files import csv_dicts, read_text
from nlptasks.errors import DataError, NlptasksError, first_line

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict

    from nlptasks.context import RunContext

__all__ = [
    "ROW_COLUMN",
    "SPLITS",
    "TEXT_COLUMN",
    "detect_format",
    "iter_jsonl",
    "load_data",
    "load_file",
    "load_hub",
    "numbered_jsonl",
    "read_rows",
    "rows_to_dataset",
]

SPLITS = ("train", "validation", "test")
ROW_COLUMN = "__row__"
"""Column that default step 2 adds: each row's number in its file (1-based, header excluded), kept
through the split so that a plugin's error can name the file row even for a carved-out split."""
_EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".txt": "txt",
}
TEXT_COLUMN = "text"
"""The one column of a ``.txt`` file's rows (its non-blank lines)."""


def detect_format(path: Path, declared: str = "auto") -> str:
    if declared != "auto":
        return declared
    if path.is_dir():
        return "disk"
    fmt = _EXTENSIONS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(
            f"cannot tell the format from the extension {path.suffix!r}",
            path=str(path),
            hint="Use .csv, .tsv, .json, .jsonl, .txt, or set data.format in the recipe.",
        )
    return fmt


def read_rows(path: Path, fmt: str) -> list[dict[str, Any]]:
    """Rows of a csv/json/jsonl/txt file as dicts (values as written in the file); a file that is not
    UTF-8, not a regular file, or badly quoted is a :class:`DataError` naming the file and row."""
    text = read_text(path, header_lines=1 if fmt == "csv" else 0)
    if fmt == "csv":
        delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
        return list(csv_dicts(io.StringIO(text, newline=""), str(path), delimiter, path.suffix))
    if fmt == "jsonl":
        return list(iter_jsonl(io.StringIO(text), str(path)))
    if fmt == "txt":
        lines = enumerate(text.splitlines(), start=1)
        return [{TEXT_COLUMN: line.strip(), ROW_COLUMN: number} for number, line in lines if line.strip()]
    if fmt == "json":
        obj = _json(text, str(path))
        if isinstance(obj, dict) and isinstance(obj.get("data"), list):
            obj = obj["data"]
        if not isinstance(obj, list) or not all(isinstance(o, dict) for o in obj):
            raise DataError('expected a list of objects (or {"data": [...]})', path=str(path))
        return obj
    raise DataError(f"unknown format {fmt!r}", path=str(path))


def _json(text: str, name: str, row: int | None = None, hint: str | None = None) -> Any:
    """``json.loads`` with its failures as a :class:`DataError` (nesting too deep included)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"column {exc.colno}" if row is not None else f"line {exc.lineno}, column {exc.colno}"
        raise DataError(f"invalid JSON: {exc.msg} ({where})", path=name, row=row, hint=hint) from None
    except RecursionError:
        raise DataError("JSON nested too deeply to read", path=name, row=row, hint=hint) from None


def rows_to_dataset(
    rows: list[dict[str, Any]], path: str, on_malformed: Callable[[int, str], None] | None = None
) -> Dataset:
    """The rows as a table.  A value of another kind than its column's (a list among strings) is a
    :class:`DataError` naming the row; with ``on_malformed`` the row is left out instead, passed to
    it as ``(row, reason)``, and the kept rows carry their numbers in :data:`ROW_COLUMN`."""
    from datasets import Dataset

    if not rows:
        raise DataError("the file has no data rows", path=path)
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    table = {c: [row.get(c) for row in rows] for c in columns}
    if on_malformed is not None:
        bad = _off_kind_rows(table)
        if bad:
            for number, reason in sorted(bad.items()):
                on_malformed(number, reason)
            keep = [i for i in range(len(rows)) if i + 1 not in bad]
            if not keep:
                raise DataError("no rows left: every row has a value of another kind than its column's", path=path)
            table = {c: [values[i] for i in keep] for c, values in table.items()}
            if ROW_COLUMN not in table:
                table[ROW_COLUMN] = [i + 1 for i in keep]
    same = "Give every row of a column the same kind of value (all strings or all numbers)."
    for column, values in table.items():
        problem = _mixed_types(values)
        if problem is not None:
            row, message = problem
            raise DataError(
                f"column {column!r}: {message}", path=path, row=row, hint=None if "NaN" in message else same
            )
    for _ in range(_MAX_NESTED_SKIPS):
        try:
            return Dataset.from_dict(table)
        except Exception as exc:  # noqa: BLE001 - pyarrow type errors: kinds mixed inside nested values
            found = _first_unbuildable(table)
            if found is None:
                raise DataError(
                    f"cannot build a table: {first_line(exc)} (mixed value types in a column?)", path=path
                ) from None
            index, column, reason = found
            number = table[ROW_COLUMN][index] if ROW_COLUMN in table else index + 1
            message = f"column {column!r}: its value mixes kinds with the rows above ({reason})"
            if on_malformed is None:
                raise DataError(
                    message, path=path, row=number, hint=same.replace("(all", "(in nested values too: all")
                ) from None
            on_malformed(number, message)
            if ROW_COLUMN not in table:
                table[ROW_COLUMN] = list(range(1, len(rows) + 1))
            table = {c: values[:index] + values[index + 1 :] for c, values in table.items()}
            if not table[ROW_COLUMN]:
                raise DataError("no rows left: every row mixes kinds inside its values", path=path) from None
    raise DataError(f"more than {_MAX_NESTED_SKIPS} rows mix kinds inside their values: fix the file", path=path)


_MAX_NESTED_SKIPS = 200


def _first_unbuildable(table: dict[str, list[Any]]) -> tuple[int, str, str] | None:
    """``(index, column, reason)`` of the first row whose value pyarrow cannot put in one column
    with the rows above it (a list where other rows have text, inside a list of objects), found by
    bisection; ``None`` when every column builds alone."""
    import pyarrow as pa

    def fails(values: list[Any]) -> str | None:
        try:
            pa.array(values)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            return first_line(exc)
        return None

    for column, values in table.items():
        reason = fails(values)
        if reason is None:
            continue
        lo, hi = 1, len(values)  # the shortest failing prefix ends at the row to name
        while lo < hi:
            mid = (lo + hi) // 2
            if fails(values[:mid]) is None:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1, column, fails(values[:lo]) or reason
    return None


def _off_kind_rows(table: dict[str, list[Any]]) -> dict[int, str]:
    """Row (from 1) → reason, for the rows holding a value of another kind than most of their
    column (NaN among numbers is a number: the task decides about it)."""
    from collections import Counter

    bad: dict[int, str] = {}
    for column, values in table.items():
        kinds = Counter(k for k in map(_kind, values) if k is not None)
        if len(kinds) < 2:
            continue
        usual = kinds.most_common(1)[0][0]
        for i, value in enumerate(values, start=1):
            kind = _kind(value)
            if kind is not None and kind != usual:
                bad.setdefault(i, f"column {column!r} holds a {kind} where its rows hold a {usual}")
    return bad


def _kind(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def _mixed_types(values: list[Any]) -> tuple[int, str] | None:
    """``(row, message)`` for the first value of another kind than most of the column's (rows from 1;
    a tie goes to the first row's kind), or ``None``: a number in row 1 of a column of strings is
    row 1's fault, not row 2's.  NaN among strings is named as such (a missing value written by
    pandas); in a column of numbers it is a number, left to the task (which treats it as missing or
    refuses it)."""
    import math
    from collections import Counter

    kinds = [(i, kind) for i, kind in enumerate(map(_kind, values), start=1) if kind is not None]
    counts = Counter(kind for _, kind in kinds)
    if len(counts) < 2:
        return None
    order = {kind: n for n, (_, kind) in reversed(list(enumerate(kinds)))}  # each kind's first position
    usual = max(counts, key=lambda k: (counts[k], -order[k]))
    example = next(i for i, kind in kinds if kind == usual)
    for i, kind in kinds:
        if kind == usual:
            continue
        value = values[i - 1]
        where = (
            f"row {example} and {counts[usual] - 1} other(s) hold a {usual}"
            if counts[usual] > 1
            else (f"row {example} has a {usual}")
        )
        if isinstance(value, float) and not math.isfinite(value):
            return i, f"the value is {value!r} (NaN or infinite) where {where}; give a real value or remove the row"
        return i, f"a {kind} ({json.dumps(value, ensure_ascii=False)[:40]}) where {where}"
    return None


def load_file(
    path: str, declared_format: str = "auto", on_malformed: Callable[[int, str], None] | None = None
) -> Dataset:
    """One split from a csv/tsv, json, jsonl, txt file or a ``save_to_disk`` folder (``declared_format``:
    ``data.format``, ``auto`` by the extension), values as the file spells them; errors name the
    file and row.  What default step 2 reads each split with, for a plugin's own step 2.

    A row with a value of another kind than its column's (a list among strings) is an error naming
    it; with ``on_malformed(row, reason)`` it is left out and passed there instead (the kept rows
    then carry their numbers in :data:`ROW_COLUMN`)."""
    p = Path(path)
    fmt = detect_format(p, declared_format)
    if fmt == "disk":
        from datasets import Dataset, DatasetDict, load_from_disk

        try:
            loaded = load_from_disk(str(p))
        except Exception as exc:  # noqa: BLE001
            reason = "" if "is neither" in str(exc) else f" ({first_line(exc)})"  # datasets: no state.json
            raise DataError(
                f"is a folder, and not one Dataset.save_to_disk wrote{reason}",
                path=str(p),
                hint="Point the recipe at a data file (.csv, .tsv, .json, .jsonl), or at a folder "
                "Dataset.save_to_disk wrote.",
            ) from None
        if isinstance(loaded, DatasetDict):
            raise DataError(
                f"holds several splits ({', '.join(loaded)}); point data.train at one split's folder",
                path=str(p),
            )
        assert isinstance(loaded, Dataset)
        return loaded
    return rows_to_dataset(read_rows(p, fmt), str(p), on_malformed)


def load_data(ctx: RunContext) -> DatasetDict:
    """Default step 2: local files or a hub dataset, cut to ``max_train_rows``/``max_eval_rows``.

    Every split gets a ``__row__`` column (:data:`ROW_COLUMN`): the row's number in its source.
    With ``ctx.skip_malformed_rows``, a row whose value is of another kind than its column's is
    left out and counted (``ctx.drop(split, "malformed", n)``) instead of stopping the run.
    """
    from datasets import DatasetDict

    cfg = ctx.recipe.data
    if cfg.hub:
        data = load_hub(cfg.hub, cfg.hub_config)
        for split in data:
            ctx.sources[split] = f"{cfg.hub}[{split}]"
    else:
        data = DatasetDict()
        for split in SPLITS:
            path = getattr(cfg, split)
            if path:
                skipped: list[int] = []
                on_malformed = (lambda row, _reason, out=skipped: out.append(row)) if ctx.skip_malformed_rows else None
                data[split] = load_file(path, cfg.format, on_malformed)
                ctx.sources[split] = path
                ctx.drop(split, "malformed", len(skipped))
    for split in list(data):
        if ROW_COLUMN not in data[split].column_names:
            data[split] = data[split].add_column(ROW_COLUMN, list(range(1, len(data[split]) + 1)))
        limit = cfg.max_train_rows if split == "train" else cfg.max_eval_rows
        if limit is not None and len(data[split]) > limit:
            data[split] = data[split].select(range(limit))
    for split in data:
        ctx.log.info("%s: %d rows from %s", split, len(data[split]), ctx.sources.get(split, split))
    return data


def load_hub(dataset_id: str, config: str | None) -> DatasetDict:
    """A hub dataset (needs internet): splits renamed to train/validation/test where obvious."""
    from datasets import DatasetDict, load_dataset

    try:
        loaded = load_dataset(dataset_id, config)
    except Exception as exc:  # noqa: BLE001 - offline, typo, gated...
        raise NlptasksError(
            f"data.hub: cannot load dataset {dataset_id!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
            hint="Check the id and your internet connection, or point data.train at a local file.",
        ) from None
    assert isinstance(loaded, DatasetDict)
    renames = {"dev": "validation", "valid": "validation", "val": "validation"}
    data = DatasetDict()
    for split, ds in loaded.items():
        data[renames.get(split, split)] = ds
    if "train" not in data:
        raise NlptasksError(f"data.hub: dataset {dataset_id!r} has no 'train' split (splits: {', '.join(loaded)})")
    return DatasetDict({k: v for k, v in data.items() if k in SPLITS})


def iter_jsonl(lines: Iterable[str], name: str) -> Iterator[dict[str, Any]]:
    """The objects of a JSON-lines stream, one per non-blank line, read lazily (training files
    and ``nlptasks infer --file`` streams alike); a line that is not a JSON object is a
    :class:`DataError` naming ``name`` and the line number."""
    for _, obj in numbered_jsonl(lines, name):
        yield obj


def numbered_jsonl(
    lines: Iterable[str], name: str, on_invalid: Callable[[int], None] | None = None, hint: str | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSON-lines stream, read lazily.

    A line that is not a JSON object is a :class:`DataError` naming ``name``, the line and
    ``hint``; with ``on_invalid`` it is passed the line number instead and skipped (a plugin's
    "skip bad rows" option, counted there)."""
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = _json(line, name, row=i, hint=hint)
        except DataError:
            if on_invalid is not None:
                on_invalid(i)
                continue
            raise
        if not isinstance(obj, dict):
            if on_invalid is not None:
                on_invalid(i)
                continue
            raise DataError("each line must be a JSON object", path=name, row=i, hint=hint)
        yield i, obj
