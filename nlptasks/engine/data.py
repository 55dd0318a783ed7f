"""Steps 2 and 3, generic part: read csv/json/jsonl/disk/hub data and split it.

Local files are read with the standard library (``csv``, ``json``) so that every value stays as
the file spells it (labels ``"0"``/``"1"`` stay strings) and every error can name the file and
row; rows are numbered from 1, header excluded (for jsonl: the line number).
"""

from __future__ import annotations

import csv
import json
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlptasks.errors import DataError, NlptasksError

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict

    from nlptasks.context import RunContext

__all__ = [
    "ROW_COLUMN",
    "SPLITS",
    "detect_format",
    "iter_jsonl",
    "load_data",
    "load_file",
    "load_hub",
    "numbered_jsonl",
    "read_rows",
    "rows_to_dataset",
    "split_data",
    "stratified_indices",
]

SPLITS = ("train", "validation", "test")
ROW_COLUMN = "__row__"
"""Column that default step 2 adds: each row's number in its file (1-based, header excluded), kept
through the split so that a plugin's error can name the file row even for a carved-out split."""
_EXTENSIONS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}


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
            hint="Use .csv, .json, .jsonl, or set data.format in the recipe.",
        )
    return fmt


def read_rows(path: Path, fmt: str) -> list[dict[str, Any]]:
    """Rows of a csv/json/jsonl file as dicts (values as written in the file)."""
    try:
        return _read_rows(path, fmt)
    except UnicodeDecodeError as exc:
        raise _encoding_error(path, fmt, exc) from None


def _encoding_error(path: Path, fmt: str, exc: UnicodeDecodeError) -> DataError:
    """A file that is not UTF-8: say which encoding it looks like, and the row of the first bad byte."""
    raw = path.read_bytes()
    hint = "Save the file as UTF-8 (e.g. iconv -f GBK -t UTF-8 in.csv > out.csv, or 'Save as UTF-8' in a spreadsheet)."
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return DataError("the file is UTF-16 (it starts with a UTF-16 byte-order mark); nlptasks reads UTF-8",
                         path=str(path), hint=hint.replace("GBK", "UTF-16"))
    line = raw[: exc.start].count(b"\n") + 1
    row = line - 1 if fmt == "csv" and line > 1 else line
    header = fmt == "csv" and line == 1
    return DataError(
        f"not UTF-8 text: byte 0x{raw[exc.start]:02x} (GBK or Latin-1, perhaps){' in the header' if header else ''}",
        path=str(path), row=None if header else row, hint=hint,
    )


def _read_rows(path: Path, fmt: str) -> list[dict[str, Any]]:
    if fmt == "csv":
        delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
        with path.open(encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh, delimiter=delimiter)
            if not reader.fieldnames:
                raise DataError("the file is empty (no header row)", path=str(path))
            if len(reader.fieldnames) == 1:
                for other in (";", "\t", "|") if delimiter == "," else (",", ";", "|"):
                    if other in reader.fieldnames[0]:
                        shown = "tab" if other == "\t" else repr(other)
                        read_as = "comma" if delimiter == "," else "tab"
                        raise DataError(
                            f"the header {reader.fieldnames[0]!r} is a single column: the file looks "
                            f"{shown}-separated, but {path.suffix or 'this'} files are read {read_as}-separated",
                            path=str(path),
                            hint="Save it with commas as .csv, or with tabs as .tsv.",
                        )
            rows = []
            for i, row in enumerate(reader, start=1):
                if None in row:
                    raise DataError(
                        f"{len(reader.fieldnames) + len(row[None])} fields, the header has "
                        f"{len(reader.fieldnames)} (unquoted comma?)",
                        path=str(path),
                        row=i,
                    )
                rows.append(dict(row))
            if not rows:
                rows = [dict.fromkeys(reader.fieldnames, None)][:0]
            return rows
    if fmt == "jsonl":
        with path.open(encoding="utf-8-sig") as fh:
            return list(iter_jsonl(fh, str(path)))
    if fmt == "json":
        try:
            obj = json.loads(path.read_text(encoding="utf-8-sig"))
        except json.JSONDecodeError as exc:
            raise DataError(f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", path=str(path)) from None
        if isinstance(obj, dict) and isinstance(obj.get("data"), list):
            obj = obj["data"]
        if not isinstance(obj, list) or not all(isinstance(o, dict) for o in obj):
            raise DataError("expected a list of objects (or {\"data\": [...]})", path=str(path))
        return obj
    raise DataError(f"unknown format {fmt!r}", path=str(path))


def rows_to_dataset(rows: list[dict[str, Any]], path: str) -> Dataset:
    from datasets import Dataset

    if not rows:
        raise DataError("the file has no data rows", path=path)
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    table = {c: [row.get(c) for row in rows] for c in columns}
    for column, values in table.items():
        problem = _mixed_types(values)
        if problem is not None:
            row, message = problem
            same = "Give every row of a column the same kind of value (all strings or all numbers)."
            hint = None if "NaN" in message else same
            raise DataError(f"column {column!r}: {message}", path=path, row=row, hint=hint)
    try:
        return Dataset.from_dict(table)
    except Exception as exc:  # noqa: BLE001 - pyarrow type errors: mixed types in a column
        raise DataError(f"cannot build a table: {str(exc).splitlines()[0]} (mixed value types in a column?)", path=path) from None


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
    """``(row, message)`` for the first value of another kind than the column's first value (rows
    from 1), or ``None``.  NaN among strings is named as such (a missing value written by pandas);
    in a column of numbers it is a number, left to the task (which treats it as missing or refuses it)."""
    import math

    first: tuple[int, str] | None = None
    for i, value in enumerate(values, start=1):
        kind = _kind(value)
        if kind is None:
            continue
        if first is None:
            first = (i, kind)
        elif kind != first[1]:
            if isinstance(value, float) and not math.isfinite(value):
                return i, (f"the value is {value!r} (NaN or infinite) where row {first[0]} has a {first[1]}; "
                           "give a real value or remove the row")
            return i, f"a {kind} ({json.dumps(value, ensure_ascii=False)[:40]}) where row {first[0]} has a {first[1]}"
    return None


def load_file(path: str, declared_format: str = "auto") -> Dataset:
    """One split from a csv/tsv, json, jsonl file or a ``save_to_disk`` folder (``declared_format``:
    ``data.format``, ``auto`` by the extension), values as the file spells them; errors name the
    file and row.  What default step 2 reads each split with, for a plugin's own step 2."""
    p = Path(path)
    fmt = detect_format(p, declared_format)
    if fmt == "disk":
        from datasets import Dataset, DatasetDict, load_from_disk

        try:
            loaded = load_from_disk(str(p))
        except Exception as exc:  # noqa: BLE001
            raise DataError(f"not a datasets save_to_disk folder: {exc}", path=str(p)) from None
        if isinstance(loaded, DatasetDict):
            raise DataError(
                f"holds several splits ({', '.join(loaded)}); point data.train at one split's folder",
                path=str(p),
            )
        assert isinstance(loaded, Dataset)
        return loaded
    return rows_to_dataset(read_rows(p, fmt), str(p))


def load_data(ctx: RunContext) -> DatasetDict:
    """Default step 2: local files or a hub dataset, cut to ``max_train_rows``/``max_eval_rows``.

    Every split gets a ``__row__`` column (:data:`ROW_COLUMN`): the row's number in its source.
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
                data[split] = load_file(path, cfg.format)
                ctx.sources[split] = path
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


def stratified_indices(
    labels: list[Any] | None, n: int, ratios: dict[str, float], seed: int
) -> dict[str, list[int]]:
    """Split ``range(n)`` into ``train`` and the named held-out parts.

    With ``labels``, each class is split on its own (so every part keeps the class mix; a class
    too small to share still goes to train).  Deterministic for a given seed.
    """
    rng = random.Random(seed)
    groups: dict[Any, list[int]] = defaultdict(list)
    if labels is None:
        groups[None] = list(range(n))
    else:
        for i, label in enumerate(labels):
            groups[label].append(i)
    parts: dict[str, list[int]] = {name: [] for name in ["train", *ratios]}
    for key in sorted(groups, key=str):
        idx = groups[key]
        rng.shuffle(idx)
        start = 0
        for name, ratio in ratios.items():
            take = int(round(ratio * len(idx)))
            if labels is None:
                take = max(take, 1) if len(idx) > len(ratios) else take
            parts[name] += idx[start : start + take]
            start += take
        parts["train"] += idx[start:]
    for name in parts:
        parts[name].sort()
    return parts


def split_data(ctx: RunContext, data: DatasetDict) -> DatasetDict:
    """Default step 3: carve missing validation/test splits out of train."""
    from datasets import DatasetDict

    cfg = ctx.recipe.data.split
    ratios: dict[str, float] = {}
    if "validation" not in data:
        ratios["validation"] = cfg.validation if cfg.validation is not None else 0.1
    if "test" not in data:
        if cfg.test is not None:
            ratios["test"] = cfg.test
        elif "validation" in ratios and cfg.validation is None:
            ratios["test"] = 0.1
    if not ratios:
        return data
    if sum(ratios.values()) >= 0.9:
        raise NlptasksError(
            f"data.split: held-out fractions add up to {sum(ratios.values()):.2f}; leave at least 10% for training"
        )
    train = data["train"]
    column = None
    if cfg.stratify and ctx.task.stratify_by is not None:
        column = ctx.task.stratify_by(ctx.options)
        if column is not None and column not in train.column_names:
            column = None  # the task's preprocessing reports the missing column with its file
    labels = [str(v) for v in train[column]] if column else None
    parts = stratified_indices(labels, len(train), ratios, cfg.seed)
    for name, ratio in ratios.items():
        if not parts[name]:
            per_class = f", split per class of {column!r}" if column else ""
            raise NlptasksError(
                f"data.split.{name}: {ratio:g} of {len(train)} training rows{per_class} leaves no rows for {name}",
                hint=f"Give data.{name} as a file, raise data.split.{name}, or split without classes: "
                "--set data.split.stratify=false",
            )
    out = DatasetDict({"train": train.select(parts["train"])})
    source = ctx.sources.get("train", "train")
    for name in ("validation", "test"):
        if name in data:
            out[name] = data[name]
        elif name in parts:
            out[name] = train.select(parts[name])
            ctx.sources[name] = f"{source} ({ratios[name]:.0%} split, seed {cfg.seed})"
    ctx.log.info(
        "split %s%s: %s",
        source,
        f", stratified on {column!r}" if column else "",
        ", ".join(f"{k} {len(v)}" for k, v in out.items()),
    )
    return out


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
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if on_invalid is not None:
                on_invalid(i)
                continue
            raise DataError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=name, row=i, hint=hint) from None
        if not isinstance(obj, dict):
            if on_invalid is not None:
                on_invalid(i)
                continue
            raise DataError("each line must be a JSON object", path=name, row=i, hint=hint)
        yield i, obj
