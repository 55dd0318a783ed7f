"""A request's JSON body, checked before any route reads it: :func:`read_json`.

Every answer names what is wrong and where, in the server's error shape
(:mod:`nlptasks.serve.errors`), instead of a parser's "There was an error parsing the body" or a
500 from deep inside a tokenizer:

* bytes that are not UTF-8: ``body is not UTF-8 at byte N (0xff)``;
* JSON nested deeper than :data:`MAX_DEPTH` levels (no request of ours needs more than 5), found
  by counting brackets before parsing, so a 100,000-deep body costs no recursion;
* text that is not JSON: the parser's reason, line and column; ``NaN`` and ``Infinity``, which
  Python's parser would take, are not JSON either;
* a string holding a lone surrogate (``"\\ud800"``: valid JSON, but no Unicode text, and no
  tokenizer reads it): the field, e.g. ``inputs[0].text`` or ``messages[1].content``.

The ``Content-Type`` is not what decides: a body that parses as JSON is JSON (``curl -d`` sends
``application/x-www-form-urlencoded``, some clients ``text/plain``); one that does not is refused
with its declared type named.
"""

from __future__ import annotations

import json
import re
from typing import Any

from nlptasks.serve.errors import ApiError

__all__ = ["MAX_DEPTH", "is_json_type", "read_json"]

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects a body may have."""

_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
"""Strings (skipped whole: a bracket inside one is text) and brackets, for :func:`_depth`."""

SEND = "send JSON with Content-Type: application/json"


def is_json_type(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` header value declares JSON (``application/json``, ``…+json``);
    no header counts as JSON."""
    if not content_type:
        return True
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def read_json(raw: bytes, content_type: str | None = None) -> Any:
    """The JSON value of a request body, or an :class:`ApiError` 400 naming what is wrong.

    :param raw: the whole body (not empty).
    :param content_type: the request's ``Content-Type`` (named in the error when it is not JSON's).
    """
    declared = "" if is_json_type(content_type) else f" (the request says Content-Type: {content_type})"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(
            400,
            f"body: not UTF-8 at byte {exc.start} (0x{raw[exc.start]:02x}){declared}; send UTF-8 JSON with "
            "Content-Type: application/json",
            "body",
        ) from None
    deep = _depth(text)
    if deep is not None:
        raise ApiError(400, f"body: JSON nested deeper than {MAX_DEPTH} levels (at character {deep}); {SEND}", "body")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ApiError(
            400,
            f"body: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} (character {exc.pos})"
            f"{declared}; {SEND}",
            "body",
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"body: not valid JSON: {exc}{declared}; {SEND}", "body") from None
    bad = _lone_surrogate(value)
    if bad is not None:
        where, text, at = bad
        raise ApiError(
            400,
            f"{where}: holds a lone surrogate (\\u{ord(text[at]):04x}) at character {at}, which is no Unicode "
            "text; send valid UTF-8 text (a surrogate escape must come in a high-low pair)",
            where,
        )
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (write a number, or null)")


def _depth(text: str) -> int | None:
    """Where (the character) the nesting first goes past :data:`MAX_DEPTH`, or ``None``."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return None
    depth = 0
    for match in _TOKENS.finditer(text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return match.start()
        elif char in "]}":
            depth -= 1
    return None


def _lone_surrogate(value: Any) -> tuple[str, str, int] | None:
    """``(field path, text, position)`` of the first string (key or value) with a surrogate."""
    todo: list[tuple[str, Any]] = [("body", value)]
    while todo:
        where, item = todo.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return where, item, exc.start
        elif isinstance(item, dict):
            for key, inner in reversed(item.items()):
                path = key if where == "body" else f"{where}.{key}"
                todo.append((path, inner))
                todo.append((f"{path} (the key)", key))
        elif isinstance(item, list):
            todo.extend((f"{where}[{i}]", inner) for i, inner in reversed(list(enumerate(item))))
    return None
