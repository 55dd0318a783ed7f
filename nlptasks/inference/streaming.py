"""Step 10 for inputs of any size: read, predict and write in chunks, so memory stays bounded.

Every caller of a predictor goes through :func:`predict_chunk` (one call, its results checked and
a ``DataError``'s row made relative to the whole input) and, for a stream of inputs,
:func:`stream_predictions`: ``nlptasks infer`` (texts, ``--file``, stdin), ``nlptasks.load`` /
``predict_file``, the server's batches, and ``nlptasks eval``'s error listing (its writer).  Rows
are read lazily (:func:`iter_rows`), grouped into chunks of ``chunk_rows``, each chunk goes to the
predictor (which sorts it into length-sorted batches and restores the order), and its results
are written before the next chunk is read.  At most one chunk of inputs and results is held at a
time, whatever the size of the file.  Standard library only: nothing heavy loads here.
"""

from __future__ import annotations

import csv
import itertools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from nlptasks.engine.io.files import csv_dicts, decoded_lines, regular_file
from nlptasks.engine.io.outputs import OutputFile, probe, refuse_inputs
from nlptasks.errors import DataError, NlptasksError

__all__ = [
    "CHUNK_ROWS",
    "CsvWriter",
    "JsonlWriter",
    "OUTPUT_FORMATS",
    "TABLE_SUFFIXES",
    "TaskFormatWriter",
    "check_output",
    "chunked",
    "count_rows",
    "file_kind",
    "iter_file",
    "iter_rows",
    "iter_stdin",
    "open_output",
    "predict_chunk",
    "run_rows",
    "stream_predictions",
]

CHUNK_ROWS = 2048  # even: a predictor may take plain lines two at a time (two texts per input)
TABLE_SUFFIXES = {".csv", ".tsv", ".jsonl", ".json"}
OUTPUT_FORMATS = {
    "jsonl": "JSON lines, one object per input (default)",
    "csv": "CSV with a header; nested values (lists, dicts) as JSON",
}


def iter_rows(stream: Any, kind: str, name: str = "<stdin>") -> Iterator[Any]:
    """Inputs from an open stream (binary, decoded line by line, or text), one at a time: dicts for
    ``csv``/``tsv``/``jsonl``, the non-empty lines (without the newline) for ``txt``.  Nothing is
    read ahead beyond the stream's own buffer.  Errors name ``name`` and the row (1-based, header
    excluded); a byte that is not UTF-8, its line."""
    lines = decoded_lines(stream, name, header_lines=1 if kind in {"csv", "tsv"} else 0)
    if kind in {"csv", "tsv"}:
        yield from csv_dicts(lines, name, "\t" if kind == "tsv" else ",", f".{kind}")
    elif kind == "jsonl":
        from nlptasks.engine.data.reading import iter_jsonl

        yield from iter_jsonl(lines, name)
    else:
        for line in lines:
            line = line.rstrip("\r\n")
            if line.strip():
                yield line


def iter_stdin(stream: Any, name: str = "<stdin>") -> Iterator[Any]:
    """Inputs piped on stdin: JSON lines (dicts) when the first non-empty line is a JSON object,
    else the non-empty lines as strings (the rule of :class:`nlptasks.types.Predictor`).  The
    bytes are decoded line by line (``stream.buffer`` when there is one)."""
    lines = decoded_lines(getattr(stream, "buffer", stream), name)
    first, blank = None, []
    for line in lines:
        if line.strip():
            first = line
            break
        blank.append(line)  # kept, so that line numbers in errors stay right
    if first is None:
        return
    head = first.strip()
    is_json = False
    if head.startswith("{"):
        try:
            is_json = isinstance(json.loads(head), dict)
        except (json.JSONDecodeError, RecursionError):
            is_json = False
    rest = itertools.chain(blank, [first], lines)
    if is_json:
        from nlptasks.engine.data.reading import iter_jsonl

        yield from iter_jsonl(rest, name)
    else:
        yield from iter_rows(rest, "txt", name)


def file_kind(path: Path) -> str:
    """How to read ``path``: ``csv``, ``tsv``, ``jsonl``, ``json`` or ``txt`` (any other extension)."""
    suffix = path.suffix.lower()
    return suffix.lstrip(".") if suffix in TABLE_SUFFIXES else "txt"


def iter_file(path: Path) -> Iterator[Any]:
    """The inputs of ``path`` one at a time (a ``.json`` array is read whole: JSON has no rows)."""
    kind = file_kind(regular_file(path))
    if kind == "json":
        from nlptasks.engine.data.reading import read_rows

        yield from read_rows(path, "json")
        return
    with path.open("rb") as fh:
        yield from iter_rows(fh, kind, str(path))


def count_rows(path: Path) -> int | None:
    """The number of inputs in ``path`` when it is cheap to know (one pass over the bytes for
    txt/jsonl, a csv parse for csv/tsv); ``None`` for other files."""
    kind = file_kind(path)
    try:
        if kind in {"txt", "jsonl"}:
            n = 0
            with path.open("rb") as fh:
                for line in fh:
                    n += bool(line.strip())
            return n
        if kind in {"csv", "tsv"}:
            with path.open(encoding="utf-8-sig", newline="") as fh:
                return max(sum(1 for _ in csv.reader(fh, delimiter="\t" if kind == "tsv" else ",")) - 1, 0)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None  # the reading itself names the problem, with its row
    return None


def run_rows(
    manifest: Mapping[str, Any], limit: int, splits: tuple[str, ...]
) -> tuple[str | None, str | None, list[Any]]:
    """``(split, file, rows)``: up to ``limit`` rows of the run's first split in ``splits`` (its
    manifest's ``data.sources``) that is a local file this reader reads, as the dicts a predictor
    takes; ``(None, None, [])`` when there is none."""
    sources = (manifest.get("data") or {}).get("sources") or {}
    for split in splits:
        source = sources.get(split)
        if not isinstance(source, str) or not Path(source).is_file():
            continue
        rows = []
        try:
            for row in iter_file(Path(source)):
                rows.append(row)
                if len(rows) >= limit:
                    break
        except Exception:  # noqa: BLE001 - a format the generic reader does not know: the next split
            continue
        if rows:
            return split, source, rows
    return None, None, []


def chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Lists of up to ``size`` consecutive items; the next item is read only when its chunk is due."""
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class JsonlWriter:
    """One JSON object per line."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, results: list[dict[str, Any]]) -> None:
        self.stream.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in results))
        self.stream.flush()

    def close(self) -> None:
        pass


class CsvWriter:
    """A header from the first results' keys, then one row per result; lists and dicts as JSON."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.writer: Any = None
        self.rows = 0

    def write(self, results: list[dict[str, Any]]) -> None:
        if self.writer is None and results:
            columns: list[str] = []
            for r in results:
                columns += [k for k in r if k not in columns]
            self.writer = csv.DictWriter(self.stream, fieldnames=columns, restval="", lineterminator="\n")
            self.writer.writeheader()
        for r in results:
            self.rows += 1
            extra = [k for k in r if k not in self.writer.fieldnames]
            if extra:
                raise NlptasksError(
                    f"--format csv: result {self.rows} has field {extra[0]!r}, which the header "
                    f"(from the first results) lacks",
                    hint="Use --format jsonl for mixed results.",
                )
            self.writer.writerow(
                {k: json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v for k, v in r.items()}
            )
        self.stream.flush()

    def close(self) -> None:
        pass


class TaskFormatWriter:
    """A predictor's own format (``write_outputs(results, fmt, stream)``), one chunk at a time."""

    def __init__(self, predictor: Any, fmt: str, stream: TextIO) -> None:
        self.predictor, self.fmt, self.stream = predictor, fmt, stream

    def write(self, results: list[dict[str, Any]]) -> None:
        self.predictor.write_outputs(results, self.fmt, self.stream)
        self.stream.flush()

    def close(self) -> None:
        pass


def predict_chunk(
    predictor: Callable[[list[Any]], list[dict[str, Any]]], chunk: list[Any], done: int = 0, source: str | None = None
) -> list[dict[str, Any]]:
    """``predictor(chunk)``, checked: one result per input (or one per k plain strings, for a task
    that reads k consecutive strings as the fields of one input: a pair's two texts, a question's
    candidates); a :class:`DataError` naming a row of the chunk names the row of the whole input
    (``done`` inputs came before) in ``source``."""
    try:
        results = predictor(chunk)
    except DataError as exc:
        if exc.row is None or exc.path is not None:
            raise
        raise DataError(
            exc.message.split(": ", 1)[-1], path=source, row=done + exc.row, hint=exc.hint, field=exc.field
        ) from None
    if not isinstance(results, list) or (len(results) != len(chunk) and not _fields_of_lines(chunk, results)):
        count = len(results) if isinstance(results, list) else type(results).__name__
        raise NlptasksError(
            f"the predictor returned {count} results for {len(chunk)} inputs",
            hint="A predictor returns a list with one dict per input, in order (nlptasks.Predictor).",
        )
    return results


def stream_predictions(
    predictor: Callable[[list[Any]], list[dict[str, Any]]],
    inputs: Iterable[Any],
    write: Callable[[list[dict[str, Any]]], None],
    chunk_rows: int = CHUNK_ROWS,
    total: int | None = None,
    progress: bool = False,
    source: str | None = None,
) -> int:
    """Predict ``inputs`` chunk by chunk (:func:`predict_chunk`) and hand each chunk's results to
    ``write``, in order.

    :param predictor: a step-10 predictor (list of inputs → one dict per input, in order).
    :param inputs: any iterable, read lazily: at most ``chunk_rows`` inputs are held at a time.
    :param write: called with each chunk's results before the next chunk is read.
    :param total: the number of inputs when known (the progress bar shows a percentage).
    :param progress: show a progress bar (rows, rows/s) on stderr.
    :param source: file name for errors; a predictor's ``row`` in a chunk is made file-relative.
    :returns: the number of inputs predicted.
    """
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="infer", unit=" rows", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)
    done = 0
    try:
        for chunk in chunked(inputs, chunk_rows):
            write(predict_chunk(predictor, chunk, done, source))
            done += len(chunk)
            if bar is not None:
                bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
    return done


def _fields_of_lines(chunk: list[Any], results: list[Any]) -> bool:
    """A predictor may read plain strings k at a time (the fields of one input): a k-th as many
    results is right."""
    return bool(results) and all(isinstance(x, str) for x in chunk) and len(chunk) % len(results) == 0


def open_output(path: Path | None, inputs: Mapping[str, Path | None] | None = None) -> Any:
    """``--output FILE`` as an :class:`~nlptasks.engine.io.outputs.OutputFile` (its folder created;
    written to a temporary file that ``commit()`` renames over FILE), or stdout.  An output that is
    one of ``inputs`` (label → path, e.g. ``{"--file": ...}``) is refused before anything is written."""
    if path is None:
        return sys.stdout
    refuse_inputs(path, inputs or {}, "--output")
    return OutputFile(path, "--output")


def check_output(path: Path, inputs: Mapping[str, Path | None], stdin: Any = None) -> None:
    """Refuse ``--output FILE`` when it is one of ``inputs`` (label → path) or, with ``stdin`` (the
    stream inputs are read from), the file redirected to stdin; what ``nlptasks infer`` checks
    before it loads anything."""
    named = dict(inputs)
    if stdin is not None:
        try:
            fd = stdin.fileno()
        except (AttributeError, OSError, ValueError):
            fd = None
        if fd is not None and Path(f"/dev/fd/{fd}").exists():
            named["stdin"] = Path(f"/dev/fd/{fd}")
    refuse_inputs(path, named, "--output")
    probe(path, "--output")  # a folder, a file in the way, a read-only disk: named before the model loads
