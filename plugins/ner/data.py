"""Reading and checking NER data: jsonl/json rows, CoNLL files, ``ClassLabel`` tags, tag schemes.

Every row keeps the line it came from (``__line__``: the jsonl line, the CoNLL line where the
sentence starts, or the row number of other sources), so errors name ``file:line``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlptasks.plugin import DataError, numbered_jsonl, text_lines

if TYPE_CHECKING:
    from datasets import Dataset

CONLL_SUFFIXES = {".conll", ".conllu", ".bio", ".iob", ".txt"}
PREFIXES = {"BIO": ("B", "I"), "IOB1": ("B", "I"), "BIOES": ("B", "I", "E", "S")}
LINE = "__line__"


# --------------------------------------------------------------------------------------------
# CoNLL
# --------------------------------------------------------------------------------------------


def iter_conll(path: Path, tags_required: bool = True) -> Iterator[tuple[int, list[str], list[str]]]:
    """``(first line, tokens, tags)`` per sentence of a CoNLL file (see :func:`iter_conll_lines`)."""
    yield from iter_conll_lines(text_lines(path), str(path), tags_required)


def iter_conll_lines(
    lines: Iterable[str], where: str, tags_required: bool = True
) -> Iterator[tuple[int, list[str], list[str]]]:
    """``(first line, tokens, tags)`` per sentence of CoNLL text.

    One token per line, the token first and the tag last (columns split on whitespace; columns in
    between, such as POS tags, are ignored); a blank line ends a sentence; ``-DOCSTART-`` lines
    are skipped.  A line with a single column is an error naming the line, unless
    ``tags_required`` is false (inference input: tokens only; ``tags`` is then empty).
    """
    tokens: list[str] = []
    tags: list[str] = []
    start = 0
    for number, line in enumerate(lines, start=1):
        parts = line.split()
        if not parts:
            if tokens:
                yield start, tokens, tags
            tokens, tags = [], []
            continue
        if parts[0] == "-DOCSTART-":
            continue
        if len(parts) < 2 and tags_required:
            raise DataError(
                f"expected 'TOKEN TAG' (token and tag separated by a space or tab), got {line.strip()!r}",
                path=where,
                row=number,
            )
        if not tokens:
            start = number
        tokens.append(parts[0])
        if len(parts) >= 2 and tags_required:
            tags.append(parts[-1])
    if tokens:
        yield start, tokens, tags


def write_conll(sentences: list[tuple[list[str], list[str]]], stream: Any) -> None:
    """Token and tag per line (tab between), a blank line after each sentence."""
    for tokens, tags in sentences:
        for token, tag in zip(tokens, tags, strict=True):
            stream.write(f"{token}\t{tag}\n")
        stream.write("\n")


# --------------------------------------------------------------------------------------------
# Local files with line numbers
# --------------------------------------------------------------------------------------------


def read_jsonl(path: Path, skip_invalid: bool = False) -> tuple[list[dict[str, Any]], int]:
    """Objects of a jsonl file, each with its line number in ``__line__``, and how many invalid
    lines were skipped (``skip_invalid``; otherwise an invalid line is a :class:`DataError`)."""
    skipped: list[int] = []
    rows = []
    for number, obj in numbered_jsonl(
        text_lines(path),
        str(path),
        on_invalid=skipped.append if skip_invalid else None,
        hint="Fix the line, or skip bad rows with --set options.skip_invalid_rows=true.",
    ):
        obj[LINE] = number
        rows.append(obj)
    return rows, len(skipped)


def is_conll(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in CONLL_SUFFIXES


@dataclass
class Checked:
    """Rows of one split after the shape checks: parallel lists, plus what was skipped."""

    tokens: list[list[str]] = field(default_factory=list)
    tags: list[list[Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def check_rows(
    rows: Iterator[tuple[int, Any, Any]], path: str, tokens_key: str, tags_key: str, skip_invalid: bool
) -> Checked:
    """Shape checks: tokens and tags are lists of the same length; empty sentences are skipped.

    :param rows: ``(line, tokens, tags)`` triples.
    :param skip_invalid: count and skip bad rows instead of raising :class:`DataError`.
    """
    out = Checked()
    hint = "Fix the row, or skip bad rows with --set options.skip_invalid_rows=true."
    for line, tokens, tags in rows:
        problem = None
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            problem = ("bad tokens", f"{tokens_key!r} must be a list of strings, got {_short(tokens)}")
        elif not isinstance(tags, list) or not all(isinstance(t, (str, int)) and not isinstance(t, bool) for t in tags):
            problem = ("bad tags", f"{tags_key!r} must be a list of tags (strings), got {_short(tags)}")
        elif len(tokens) != len(tags):
            problem = ("length mismatch", f"{len(tokens)} tokens but {len(tags)} tags")
        if problem is not None:
            if skip_invalid:
                out.skip(problem[0])
                continue
            raise DataError(problem[1], path=path, row=line, hint=hint)
        if not tokens:
            out.skip("empty sentence")
            continue
        out.tokens.append(tokens)
        out.tags.append(tags)
        out.lines.append(line)
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def to_dataset(checked: Checked, tokens_key: str, tags_key: str) -> Dataset:
    from datasets import Dataset

    return Dataset.from_dict(
        {tokens_key: checked.tokens, tags_key: [[str(t) for t in ts] for ts in checked.tags], LINE: checked.lines}
    )


def class_label_names(ds: Any, column: str) -> list[str] | None:
    """Tag names when ``column`` is a sequence of ``ClassLabel`` (hub datasets store int tags)."""
    feature = ds.features.get(column) if hasattr(ds, "features") and ds.features else None
    inner = getattr(feature, "feature", None)
    names = getattr(inner, "names", None)
    return list(names) if names else None


# --------------------------------------------------------------------------------------------
# Tags: parse, check against the scheme, repair invalid transitions
# --------------------------------------------------------------------------------------------


def split_tag(tag: str) -> tuple[str, str | None]:
    """``"B-PER"`` → ``("B", "PER")``; ``"O"`` → ``("O", None)``; also accepts ``B_PER``."""
    if tag == "O":
        return "O", None
    for sep in ("-", "_"):
        if len(tag) > 2 and tag[1] == sep:
            return tag[0], tag[2:]
    return "", None


@dataclass
class Repairs:
    """Invalid transitions found (and repaired, unless the option says error), per split."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, split: str, n: int = 1) -> None:
        self.counts[split] = self.counts.get(split, 0) + n


def repair_sentence(tags: list[str], scheme: str) -> tuple[list[str], int | None]:
    """Fix entity-inside tags that do not continue an entity of the same type.

    BIO: ``I-X`` after ``O`` or after another type becomes ``B-X``.  BIOES: ``I-X``/``E-X`` that
    do not continue ``X`` become ``B-X``/``S-X``.  IOB1 needs no repair (``I-X`` may start an
    entity).  Returns the fixed tags and the index of the first fix (``None``: nothing to fix).
    """
    if scheme == "IOB1":
        return tags, None
    fixed = list(tags)
    first = None
    prev_prefix, prev_type = "O", None
    for i, tag in enumerate(tags):
        prefix, kind = split_tag(tag)
        continues = prev_type == kind and prev_prefix in ("B", "I")
        if prefix in ("I", "E") and not continues:
            new = ("B" if prefix == "I" else "S") + "-" + str(kind)
            fixed[i] = new
            prefix = new[0]
            if first is None:
                first = i
        prev_prefix, prev_type = prefix, kind
    return fixed, first


def ordered_labels(types: set[str], scheme: str) -> list[str]:
    """``O`` then, per entity type in name order, one tag per scheme prefix."""
    return ["O"] + [f"{p}-{t}" for t in sorted(types) for p in PREFIXES[scheme]]
