"""Reading text files safely: UTF-8 with the first bad byte named by its line (a NUL byte, the mark
of a binary file or of UTF-16 without its byte-order mark, too), only regular files
(a device such as ``/dev/zero`` is refused, not read until memory runs out), and CSV parsed so
that no row is lost without a word.

CSV: a quote that is never closed, or closed in the wrong place, made Python's csv module
(lax by default) swallow the rest of the file into one field: a file of 1,200 rows read as 40.
Here the parser is strict (a misplaced quote is an error naming the row), and a quoted field
whose lines look like rows of their own (as many fields as the header) is reported as an
unterminated quote instead of being taken as text.  Fields may be as long as a file holds
(the csv module's limit of 128 KiB is lifted).
"""

from __future__ import annotations

import csv
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from nlptasks.errors import DataError

__all__ = ["csv_dicts", "decoded_lines", "read_text", "regular_file", "text_lines"]

_HINT = "Save the file as UTF-8 (e.g. iconv -f GBK -t UTF-8 in.csv > out.csv, or 'Save as UTF-8' in a spreadsheet)."
_SWALLOWED_LINES = 2  # a quoted field holding at least this many row-shaped lines is a lost quote

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


def regular_file(path: Path) -> Path:
    """``path`` if it is a regular file, else a :class:`DataError` saying what it is."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise DataError("file not found", path=str(path)) from None
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror}", path=str(path)) from None
    if stat.S_ISDIR(mode):
        raise DataError("is a folder, not a file", path=str(path))
    if not stat.S_ISREG(mode):
        raise DataError("is not a regular file (a device, a pipe or a socket): nlptasks reads files", path=str(path))
    return path


def _not_utf8(name: str, raw: bytes, offset: int, line: int, header_lines: int = 0) -> DataError:
    byte = raw[offset] if offset < len(raw) else 0
    row = line - header_lines
    where = " in the header" if row < 1 else f" (line {line})" if header_lines else ""
    return DataError(
        f"not UTF-8 text: byte 0x{byte:02x} (GBK or Latin-1, perhaps){where}",
        path=name,
        row=row if row >= 1 else None,
        hint=_HINT,
    )


def _nul(name: str, line: int, header_lines: int = 0) -> DataError:
    row = line - header_lines
    where = " in the header" if row < 1 else f" (line {line})" if header_lines else ""
    return DataError(
        f"a NUL byte{where}: not a text file (binary, or UTF-16 without a byte-order mark?)",
        path=name,
        row=row if row >= 1 else None,
        hint="Save the file as UTF-8 text (from UTF-16: iconv -f UTF-16LE -t UTF-8 in.csv > out.csv).",
    )


def read_text(path: Path, header_lines: int = 0) -> str:
    """The whole file as text: UTF-8, a byte-order mark dropped.  A file that is not UTF-8 is a
    :class:`DataError` naming the row of the first bad byte: its line, less ``header_lines`` (a csv
    file's rows are counted without the header)."""
    raw = regular_file(path).read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DataError(
            "the file is UTF-16 (it starts with a UTF-16 byte-order mark); nlptasks reads UTF-8",
            path=str(path),
            hint=_HINT.replace("GBK", "UTF-16"),
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:  # exc.start counts from the start of the file: the line is exact
        raise _not_utf8(str(path), raw, exc.start, raw[: exc.start].count(b"\n") + 1, header_lines) from None
    nul = text.find("\0")
    if nul >= 0:
        raise _nul(str(path), text[:nul].count("\n") + 1, header_lines)
    return text


def text_lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file (line ends kept), read lazily: a byte that is not UTF-8 is a
    :class:`DataError` naming its line, a folder or a device is one naming what it is, a
    byte-order mark is dropped.  For plugins that read a format of their own (CoNLL, jsonl)."""
    with regular_file(Path(path)).open("rb") as fh:
        yield from decoded_lines(fh, str(path))


def decoded_lines(stream: IO[Any] | Iterable[Any], name: str, header_lines: int = 0) -> Iterator[str]:
    """The lines of a binary stream decoded one by one (so that a bad byte names its line), or of
    a text stream as they are; a byte-order mark at the start is dropped (a UTF-16 one refused).
    Errors name the row: the line less ``header_lines``, as :func:`read_text`."""
    for number, line in enumerate(stream, start=1):
        if isinstance(line, bytes):
            if number == 1 and line.startswith((b"\xff\xfe", b"\xfe\xff")):
                raise DataError(
                    "the input is UTF-16 (it starts with a UTF-16 byte-order mark); nlptasks reads UTF-8",
                    path=name,
                    hint=_HINT.replace("GBK", "UTF-16"),
                )
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(name, line, exc.start, number, header_lines) from None
        if number == 1:
            line = line.removeprefix("\ufeff")
        if "\0" in line:
            raise _nul(name, number, header_lines)
        yield line


class _Lines:
    """An iterator over text lines that knows the line number of the last one it gave."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = iter(lines)
        self.number = 0

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.number += 1
        return line


def csv_dicts(lines: Iterable[str], name: str, delimiter: str = ",", suffix: str = "") -> Iterator[dict[str, Any]]:
    """The rows of CSV text (lines keeping their line ends) as dicts, lazily; errors name the row
    (1-based, header excluded): a misplaced or unterminated quote, more fields than the header, a
    header that looks split by another delimiter."""
    source = _Lines(lines)
    reader = csv.reader(source, delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise DataError("the file is empty (no header row)", path=name) from None
    except csv.Error as exc:
        raise DataError(f"the header row is not valid CSV ({exc})", path=name) from None
    if not header:
        raise DataError("the file is empty (no header row)", path=name)
    names = [h.strip() for h in header]
    twice = sorted({h for h in names if h and names.count(h) > 1})
    if twice:  # a dict keeps the last of them: the other column's values would be lost without a word
        where = "; ".join(
            f"{h!r} (columns {', '.join(str(i + 1) for i, n in enumerate(names) if n == h)})" for h in twice
        )
        raise DataError(
            f"the header names a column twice: {where}",
            path=name,
            hint="Give each column its own name in the header row.",
        )
    if len(header) == 1:
        for other in (";", "\t", "|") if delimiter == "," else (",", ";", "|"):
            if other in header[0]:
                shown = "tab" if other == "\t" else repr(other)
                read_as = "comma" if delimiter == "," else "tab"
                raise DataError(
                    f"the header {header[0]!r} is a single column: the file looks {shown}-separated, but "
                    f"{suffix or 'these'} files are read {read_as}-separated",
                    path=name,
                    hint="Save it with commas as .csv, or with tabs as .tsv.",
                )
    row = 0
    while True:
        start = source.number + 1
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(
                f"a quoted field is not closed properly ({exc}; the row starts on line {start} and the parser "
                f"stopped on line {source.number})",
                path=name,
                row=row + 1,
                hint='Check the quotes of this row: a field that starts with " must end with " (write "" for a '
                "quote inside it).",
            ) from None
        if not values:
            continue  # a blank line
        row += 1
        if len(values) > len(header):
            raise DataError(f"{len(values)} fields, the header has {len(header)} (unquoted comma?)", path=name, row=row)
        _check_swallowed(values, header, name, row, delimiter, source.number - start + 1)
        yield dict(zip(header, values + [None] * (len(header) - len(values)), strict=True))


def _check_swallowed(values: list[str], header: list[str], name: str, row: int, delimiter: str, spanned: int) -> None:
    """A field over several lines whose lines parse as rows of the header's width: a quote opened
    in this row that only a later stray quote closed, taking the rows between as text."""
    if spanned < _SWALLOWED_LINES + 1:
        return
    for value in values:
        lines = value.split("\n")
        if len(lines) <= _SWALLOWED_LINES:
            continue
        shaped = sum(1 for line in lines[1:] if len(next(csv.reader([line], delimiter=delimiter), [])) == len(header))
        if shaped >= _SWALLOWED_LINES:
            raise DataError(
                f"a quoted field runs over {spanned} lines, {shaped} of which look like rows of their own "
                f"({len(header)} fields): a quote opened in this row is closed only further down",
                path=name,
                row=row,
                hint='Close the quote in this row (or write "" for a quote inside a field).',
            )
