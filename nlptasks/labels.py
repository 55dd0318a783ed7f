"""Class labels as task plugins read them from data: one text spelling, one sort order.

Labels stay as the data spells them (``"0"``/``"1"``, ``"正面"``), stripped; a whole number
written as a float (``1.0`` or ``"1.0"``, as pandas or JSON may give) is the integer's text, so
that ``1``, ``1.0`` and ``" 1 "`` are one class, not three.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["label_text", "sort_labels", "unique_labels"]

_WHOLE_FLOAT = re.compile(r"([+-]?\d+)\.0+")


def label_text(value: Any) -> str | None:
    """The label as text, stripped; ``None`` for a missing, empty or NaN label."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None  # NaN: a missing label (pandas writes missing values as NaN)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    whole = _WHOLE_FLOAT.fullmatch(text)
    if whole:
        text = str(int(whole.group(1)))
    return text or None


def sort_labels(labels: set[str]) -> list[str]:
    """Numeric order when every label is an integer (``2`` before ``10``), else text order."""
    try:
        return sorted(labels, key=int)
    except ValueError:
        return sorted(labels)


def unique_labels(labels: list[str] | None) -> list[str] | None:
    """A pydantic validator of an ``options.labels`` list: each label once, as :func:`label_text`
    spells it (``"1"`` and ``"1.0"`` are one label).  ``Annotated[list[str], AfterValidator(unique_labels)]``."""
    seen: dict[str, int] = {}
    for i, label in enumerate(labels or []):
        text = label_text(label)
        if text in seen:
            raise ValueError(
                f"{label!r} is listed twice (items {seen[text]} and {i}, counting from 0): give each label once"
            )
        seen[text or ""] = i
    return labels
