"""Multi-label cells joined by another character than ``options.separator``: told from labels that
merely hold the character, and refused at the first such row (``run``) or reported (``check``)."""

from __future__ import annotations

from typing import Any

from nlptasks.plugin import DataError, Finding

__all__ = ["OTHER_SEPARATORS", "list_in_another_separator", "refuse_another_separator", "separator_finding"]

OTHER_SEPARATORS = (";", ",", "，", "、", "；", "/", "|", "+")
"""Characters a labels cell may join its labels with instead of ``options.separator``."""


def list_in_another_separator(rows: list[list[str]], separator: str) -> tuple[str, int] | None:
    """``(character, index of the first row)`` when the labels look like lists joined by another
    character than ``separator``: at least two distinct labels hold it, and a part of one of them is
    a part of another, or a label of its own (``服务;房间``, ``房间;价格``, ``服务``: one label
    ``服务;房间`` is ``服务`` and ``房间``).  Such data trains one label per combination, without a
    word (14 combined labels, exact match 0.01)."""
    labels = {label for row in rows for label in row}
    for char in OTHER_SEPARATORS:
        if char == separator:
            continue
        joined = sorted(label for label in labels if char in label)
        if len(joined) < 2:
            continue
        seen: dict[str, int] = {}
        for label in joined:
            for part in {p.strip() for p in label.split(char) if p.strip()}:
                seen[part] = seen.get(part, 0) + 1
        if any(n >= 2 or part in labels for part, n in seen.items()):
            first = next(i for i, row in enumerate(rows) if any(char in label for label in row))
            return char, first
    return None


def _another(rows: list[list[str]], separator: str) -> tuple[str, int, str] | None:
    """``(character, index of the first such row, what is wrong)`` (:func:`list_in_another_separator`)."""
    found = list_in_another_separator(rows, separator)
    if found is None:
        return None
    char, index = found
    cell = next(label for label in rows[index] if char in label)
    return (
        char,
        index,
        (
            f"the labels {cell!r} look like a list joined by {char!r}, but options.separator is {separator!r}: "
            "each combination would train as one label"
        ),
    )


def refuse_another_separator(ctx: Any, split: str, numbers: list[int], rows: list[list[str]]) -> None:
    """``run``: stop at the first row whose cell joins labels by another character."""
    opts = ctx.options
    found = _another(rows, opts.separator)
    if found is None:
        return
    char, index, wrong = found
    raise DataError(
        f"column {opts.label_column!r}: {wrong}",
        path=ctx.sources.get(split, split),
        row=numbers[index],
        hint=f"Set the separator the file uses: --set 'options.separator=\"{char}\"' (or write each cell as a "
        'JSON list, ["a", "b"]).',
    )


def separator_finding(rows: dict[int, list[str]], opts: Any, split: str) -> Finding | None:
    """``nlptasks check``'s error for a split whose cells join labels by another character (``rows``:
    file row → its labels), naming every such row."""
    found = _another(list(rows.values()), opts.separator)
    if found is None:
        return None
    char, _, wrong = found
    return Finding(
        "error",
        "separator",
        f"{wrong} (set --set 'options.separator=\"{char}\"')",
        split,
        [n for n, labels in rows.items() if any(char in label for label in labels)],
    )
