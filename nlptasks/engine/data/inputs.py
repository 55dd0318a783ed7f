"""What a predictor receives, read one way for every task (the rule in
:class:`nlptasks.types.Predictor`).

Inputs are strings (texts given as arguments, lines of a ``.txt`` file or of plain stdin) or dicts
(rows of a csv/tsv/jsonl/json file, or of stdin read as JSON lines).  A task whose input has
several fields reads them with :func:`input_fields`: from a dict by column name; from a string
holding the fields separated by TABs; or, when no string holds a TAB, from consecutive strings.
Errors name the input's number (``nlptasks infer`` turns it into the file row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nlptasks.errors import DataError

__all__ = ["input_fields", "input_text", "input_texts", "input_words"]

_KINDS = {bool: "true/false", int: "a number", float: "a number", dict: "an object", list: "a list", tuple: "a list"}


def input_text(value: Any, field: str | None, index: int = 0) -> str:
    """``value`` if it is a text, else a :class:`DataError` naming input ``index + 1`` and ``field``.

    Nothing is turned into a text: ``null`` (a missing value), a number, true/false, a list or an
    object is refused, as is a string holding a lone surrogate (``"\\ud800"`` in JSON: no Unicode
    text, and no tokenizer can read it).  ``field`` is the name the error gives (``None`` for an
    input that is itself the text).

    :raises DataError: with ``row=index + 1`` and ``field``.
    """
    what = f"field {field!r}" if field is not None else "the input"
    if isinstance(value, str):
        bad = _lone_surrogate(value)
        if bad is not None:
            raise DataError(
                f"{what} holds a lone surrogate (\\u{ord(value[bad]):04x}) at character {bad}, which is no "
                "Unicode text; send the text as valid UTF-8",
                row=index + 1,
                field=field,
            )
        return value
    if value is None:
        raise DataError(f"{what} is null; give a text (a JSON string)", row=index + 1, field=field)
    kind = _KINDS.get(type(value), f"a {type(value).__name__}")
    hint = f' (write "{value}" if it is meant as a text)' if kind == "a number" else ""
    raise DataError(f"{what} holds {kind} ({_short(value)}), not a text{hint}", row=index + 1, field=field)


def input_words(value: Any, field: str, index: int = 0) -> list[str]:
    """``value`` if it is a list of texts (the ``tokens`` of an input), each checked by
    :func:`input_text`; the error names the item (``tokens[2]``)."""
    if not isinstance(value, list):
        kind = "null" if value is None else _KINDS.get(type(value), f"a {type(value).__name__}")
        raise DataError(
            f"field {field!r} must be a list of texts, not {kind} ({_short(value)})", row=index + 1, field=field
        )
    return [input_text(word, f"{field}[{j}]", index) for j, word in enumerate(value)]


def _lone_surrogate(text: str) -> int | None:
    """The position of the first surrogate code point of ``text`` (which UTF-8 cannot encode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _short(value: Any) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def input_fields(inputs: Sequence[Any], fields: Sequence[str], offset: int = 0) -> list[dict[str, str]]:
    """One dict ``{field: text}`` per input, by the rule of :class:`nlptasks.types.Predictor`.

    :param inputs: what the predictor was called with.
    :param fields: the input's field names, in order (the run's column names, e.g.
        ``("text_a", "text_b")``); dict inputs are read by these names.
    :param offset: added to the input numbers in errors (when ``inputs`` are part of a larger call).
    :returns: one dict per input; with several fields and only plain strings (no TAB), one per
        ``len(fields)`` consecutive strings.
    :raises DataError: naming the input number and what is missing or of the wrong kind.
    """
    fields = list(fields)
    n = len(fields)
    if not inputs:
        return []
    if n > 1 and not any(isinstance(x, (dict, list, tuple)) or (isinstance(x, str) and "\t" in x) for x in inputs):
        texts = [input_text(x, None, i + offset) for i, x in enumerate(inputs)]  # consecutive texts: all texts
        if len(inputs) % n:
            raise DataError(
                f"{len(inputs)} text(s) given; each input is {n} texts ({', '.join(fields)}), so give a multiple of {n}",
                hint=f"Give the {n} texts of each input in order, or one line per input with the fields separated "
                f"by a TAB, or a csv/jsonl file with the columns {', '.join(fields)}.",
            )
        return [dict(zip(fields, texts[i : i + n], strict=True)) for i in range(0, len(texts), n)]
    out = []
    for i, item in enumerate(inputs, start=offset):
        if isinstance(item, dict):
            missing = [f for f in fields if f not in item]
            if missing:
                raise DataError(f"no {missing[0]!r} field; fields: {', '.join(map(str, item)) or 'none'}", row=i + 1)
            out.append({f: input_text(item[f], f, i) for f in fields})
        elif isinstance(item, str):
            parts = [input_text(item, None, i)] if n == 1 else input_text(item, None, i).split("\t", n - 1)
            if len(parts) != n:
                raise DataError(
                    f"expected {n} fields ({', '.join(fields)}) separated by a TAB, found {len(parts)}", row=i + 1
                )
            out.append(dict(zip(fields, parts, strict=True)))
        elif isinstance(item, (list, tuple)) and len(item) == n:
            out.append({f: input_text(v, f, i) for f, v in zip(fields, item, strict=True)})
        else:
            raise DataError(
                f"cannot read an input of type {type(item).__name__} ({_short(item)}): expected a text or a row with "
                f"{', '.join(fields)}",
                row=i + 1,
            )
    return out


def input_texts(inputs: Sequence[Any], column: str = "text", offset: int = 0) -> list[str]:
    """The text of each input of a one-field task: strings as they are, dicts by ``column``."""
    return [row[column] for row in input_fields(inputs, [column], offset)]
